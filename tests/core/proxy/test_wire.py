"""core.proxy's wire: the checked-in descriptor set is the .proto's; messages map to and
from the store's the way RocketMQ 5's proxy stores them."""

import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from core.proxy import pb, wire
from core.store.message import Message, StoredMessage, pack_host

PROXY = Path(__file__).resolve().parents[3] / "core" / "proxy"


def test_checked_in_descriptor_set_is_what_the_proto_compiles_to(tmp_path):
    out = tmp_path / "fresh.binpb"
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{PROXY}", "--include_imports",
                    f"--descriptor_set_out={out}", str(PROXY / "rocketmq_v2.proto")], check=True)
    assert out.read_bytes() == (PROXY / "rocketmq_v2.binpb").read_bytes(), \
        "core/proxy/rocketmq_v2.binpb is stale: regenerate it (command in core/proxy/pb.py)"


def test_the_service_has_the_methods_of_the_wire_with_their_streaming():
    methods = {m.name: (m.input_type.name, m.output_type.name) for m in pb.SERVICE.methods}
    assert methods["SendMessage"] == ("SendMessageRequest", "SendMessageResponse")
    assert methods["ReceiveMessage"] == ("ReceiveMessageRequest", "ReceiveMessageResponse")
    assert methods["Telemetry"] == ("TelemetryCommand", "TelemetryCommand")
    assert pb.SERVICE.full_name == "apache.rocketmq.v2.MessagingService"


def test_field_numbers_are_the_wire_s():
    # a few numbers a client depends on, written from the published interface
    sp = pb.SystemProperties.DESCRIPTOR.fields_by_name
    assert (sp["message_id"].number, sp["receipt_handle"].number, sp["delivery_attempt"].number,
            sp["message_group"].number, sp["delivery_timestamp"].number) == (3, 12, 16, 17, 11)
    assert (pb.OK, pb.MESSAGE_NOT_FOUND, pb.INVALID_RECEIPT_HANDLE) == (20000, 40401, 40013)


def sent(**sp) -> pb.Message:
    m = pb.Message(body=b"payload")
    m.topic.name = "T"
    m.system_properties.message_id = "01ABC"
    for k, v in sp.items():
        if k == "keys":
            m.system_properties.keys.extend(v)
        else:
            setattr(m.system_properties, k, v)
    return m


def test_a_sent_message_is_stored_with_rocketmq_5_property_names():
    m = sent(tag="TagA", keys=["k1", "k2"], message_group="g1")
    m.user_properties["color"] = "red"
    m.system_properties.delivery_timestamp.FromMilliseconds(1_700_000_000_123)
    msg, _ = wire.to_store(m)
    assert msg.topic == "T" and msg.body == b"payload"
    assert msg.properties == {"color": "red", "TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "01ABC",
                              "__SHARDINGKEY": "g1", "TIMER_DELIVER_MS": "1700000000123"}


def test_a_transactional_message_is_stored_as_a_half_of_its_topic_s_producers():
    m = sent(message_type=pb.TRANSACTION)
    m.system_properties.orphaned_transaction_recovery_duration.FromSeconds(20)
    msg, _ = wire.to_store(m)
    assert (msg.properties["TRAN_MSG"], msg.properties["PGROUP"], msg.properties["CHECK_IMMUNITY_TIME_IN_SECONDS"]) == (
        "true", wire.transaction_group("T"), "20")
    assert wire.topic_of_transaction_group(msg.properties["PGROUP"]) == "T"
    assert wire.topic_of_transaction_group("please_rename_unique_group_name") is None


def test_a_half_is_shown_to_a_checker_in_its_real_topic_as_a_transaction():
    half = stored({"REAL_TOPIC": "Orders", "REAL_QID": "1", "TRAN_MSG": "true", "PGROUP": "%GRPC%Orders",
                   "UNIQ_KEY": "01TX", "TRAN_HELD_DELAY": "3", "k": "v"})
    m = wire.orphan_from_store(half)
    assert m.topic.name == "Orders" and m.system_properties.message_type == pb.TRANSACTION
    assert dict(m.user_properties) == {"k": "v"} and m.system_properties.message_id == "01TX"
    assert not m.system_properties.HasField("receipt_handle")


@pytest.mark.parametrize("change, code", [
    (lambda m: m.topic.ClearField("name"), pb.ILLEGAL_TOPIC),
    (lambda m: m.system_properties.ClearField("message_id"), pb.ILLEGAL_MESSAGE_ID),
    (lambda m: m.user_properties.__setitem__("UNIQ_KEY", "x"), pb.ILLEGAL_MESSAGE_PROPERTY_KEY),
    (lambda m: setattr(m.system_properties, "message_group", ""), pb.ILLEGAL_MESSAGE_GROUP),
    (lambda m: setattr(m.system_properties, "body_encoding", pb.GZIP), pb.MESSAGE_CORRUPTED),  # b"payload"
    (lambda m: setattr(m.system_properties, "body_encoding", 7), pb.BAD_REQUEST),
    (lambda m: setattr(m.system_properties, "lite_topic", "a,b"), pb.ILLEGAL_LITE_TOPIC),
])
def test_a_bad_message_is_a_wire_error_with_the_right_code_and_one_line(change, code):
    m = sent()
    change(m)
    with pytest.raises(wire.WireError) as e:
        wire.to_store(m)
    assert e.value.code == code and "\n" not in str(e.value)


def stored(props: dict, body: bytes = b"payload") -> StoredMessage:
    return StoredMessage(topic="T", body=body, queue_id=2, flag=0, queue_offset=7, physical_offset=100, sysflag=0,
                         born_timestamp=1_700_000_000_000, born_host=pack_host("10.0.0.1", 5000),
                         store_timestamp=1_700_000_000_500, store_host=pack_host("127.0.0.1", 10911),
                         reconsume_times=0, prepared_transaction_offset=0, properties=props, size=0, body_crc=0)


def test_a_stored_message_reaches_a_5x_consumer_with_system_properties_apart():
    m = wire.from_store(stored({"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "01ABC", "__SHARDINGKEY": "g1",
                                "color": "red", "CLUSTER": "DefaultCluster"}),
                        receipt_handle="h", attempt=2, invisible_ms=30_000)
    sp = m.system_properties
    assert dict(m.user_properties) == {"color": "red"}
    assert (sp.tag, list(sp.keys), sp.message_id, sp.message_group) == ("TagA", ["k1", "k2"], "01ABC", "g1")
    assert sp.message_type == pb.FIFO and sp.delivery_attempt == 2 and sp.receipt_handle == "h"
    assert (sp.queue_id, sp.queue_offset, sp.born_host, sp.store_host) == (2, 7, "10.0.0.1:5000", "127.0.0.1:10911")
    assert sp.body_digest.type == pb.CRC32 and sp.body_digest.checksum == format(zlib.crc32(b"payload"), "08X")
    assert sp.invisible_duration.ToMilliseconds() == 30_000
    assert sp.born_timestamp.ToMilliseconds() == 1_700_000_000_000


def test_a_message_without_uniq_key_gets_its_offset_id():
    sm = stored({})
    assert wire.from_store(sm, receipt_handle="h", attempt=1, invisible_ms=1000).system_properties.message_id == sm.msg_id


def test_round_trip_send_then_receive_keeps_what_the_client_set():
    m = sent(tag="T1", keys=["k"])
    m.user_properties["a"] = "b"
    msg, _ = wire.to_store(m)
    back = wire.from_store(stored(msg.properties, msg.body), receipt_handle="h", attempt=1, invisible_ms=1000)
    assert (back.system_properties.tag, list(back.system_properties.keys), dict(back.user_properties),
            back.system_properties.message_id, back.body) == ("T1", ["k"], {"a": "b"}, "01ABC", b"payload")
    assert isinstance(msg, Message)


def test_our_types_live_beside_the_5x_client_s_in_one_process():
    """The client registers the same names in protobuf's default pool; ours are private."""
    code = ("import rocketmq.v5.producer\nfrom rocketmq.grpc_protocol import definition_pb2 as d\n"
            "from core.proxy import pb\nm = pb.Resource(name='x')\n"
            "assert d.Resource.FromString(m.SerializeToString()).name == 'x'\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={"PYTHONPATH": str(PROXY.parents[1]), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr


def test_a_gzip_body_is_stored_uncompressed_within_the_body_limit():
    import gzip

    body = b"telemetry " * 2000
    m = sent(body_encoding=pb.GZIP)
    m.body = gzip.compress(body)
    msg, _ = wire.to_store(m, max_body=len(body))
    assert msg.body == body
    with pytest.raises(wire.WireError) as e:  # a small stream that inflates past the limit
        wire.to_store(m, max_body=len(body) - 1)
    assert e.value.code == pb.MESSAGE_BODY_TOO_LARGE
    for broken in (b"not gzip at all", gzip.compress(body)[:-12]):
        m.body = broken
        with pytest.raises(wire.WireError) as e:
            wire.to_store(m)
        assert e.value.code == pb.MESSAGE_CORRUPTED


def test_a_body_a_4x_producer_compressed_reaches_a_5x_consumer_as_gzip():
    import dataclasses
    import gzip

    body = b"x" * 5000 + b"end"
    sm = dataclasses.replace(stored({"UNIQ_KEY": "01ABC"}, zlib.compress(body, 5)), sysflag=0x1)
    m = wire.from_store(sm, receipt_handle="h", attempt=1, invisible_ms=1000)
    assert m.system_properties.body_encoding == pb.GZIP
    assert gzip.decompress(m.body) == body
    assert m.system_properties.body_digest.checksum == format(zlib.crc32(m.body), "08X")
    plain = wire.from_store(stored({"UNIQ_KEY": "01ABC"}, body), receipt_handle="h", attempt=1, invisible_ms=1000)
    assert (plain.system_properties.body_encoding, plain.body) == (pb.IDENTITY, body)
