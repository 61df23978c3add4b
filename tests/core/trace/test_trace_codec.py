"""core.trace: records in RocketMQ's trace data layout, read back by the reference layout."""

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.trace import (
    ConsumeReturnType, DeliveryOutcome, EndTransactionRecord, MessageType, PubRecord, SubAfterRecord,
    SubBeforeRecord, TraceBatch, TraceFormatError, decode, decode_strict, encode, mqtt_group,
)

sys.path.insert(0, str(Path(__file__).parent))
import reference_layout as ref  # noqa: E402

PUB = PubRecord(timestamp=1700000000123, group="PG", topic="Orders", msg_id="7F0000010001AB", tags="TagA",
                keys="order-1 order-2", store_host="127.0.0.1:10911", body_length=5, cost_ms=3,
                offset_msg_id="7F00000100002A9F0000000000000010", success=True, client_host="127.0.0.1@1")
BEFORE = SubBeforeRecord(timestamp=1700000000200, group="CG", request_id="REQ1", msg_id="7F0000010001AB",
                         retry_times=2, keys="order-1 order-2")
AFTER = SubAfterRecord(request_id="REQ1", msg_id="7F0000010001AB", cost_ms=7, success=False, keys="order-1 order-2",
                       context_code=int(ConsumeReturnType.FAILED), timestamp=1700000000207, group="CG")
END = EndTransactionRecord(timestamp=1700000000300, group="TXG", topic="Pay", msg_id="AB", transaction_id="TX1",
                           transaction_state="COMMIT_MESSAGE", store_host="127.0.0.1:10911", from_transaction_check=True)


def test_each_record_is_read_by_the_reference_layout_field_by_field():
    body, keys = encode([PUB, BEFORE, AFTER, END])
    pub, before, after, end = ref.read(body)
    assert pub == dict(type="Pub", timeStamp=1700000000123, regionId="DefaultRegion", groupName="PG", topic="Orders",
                       msgId="7F0000010001AB", tags="TagA", keys="order-1 order-2", storeHost="127.0.0.1:10911",
                       bodyLength=5, costTime=3, msgType=0, offsetMsgId="7F00000100002A9F0000000000000010",
                       success=True, clientHost="127.0.0.1@1")
    assert before == dict(type="SubBefore", timeStamp=1700000000200, regionId="DefaultRegion", groupName="CG",
                          requestId="REQ1", msgId="7F0000010001AB", retryTimes=2, keys="order-1 order-2")
    assert after == dict(type="SubAfter", requestId="REQ1", msgId="7F0000010001AB", costTime=7, success=False,
                         keys="order-1 order-2", contextCode=4, timeStamp=1700000000207, groupName="CG")
    assert end == dict(type="EndTransaction", timeStamp=1700000000300, regionId="DefaultRegion", groupName="TXG",
                       topic="Pay", msgId="AB", tags="null", keys="null", storeHost="127.0.0.1:10911", msgType=2,
                       transactionId="TX1", transactionState="COMMIT_MESSAGE", fromTransactionCheck=True)
    # keys of the trace message: each message id and each key, once
    assert keys == ["7F0000010001AB", "order-1", "order-2", "AB"]


def test_separators_and_absent_values_are_written_as_java_writes_them():
    body, _ = encode([PubRecord(timestamp=1, group="PG", topic="T", msg_id="M")])
    assert body == "Pub\x011\x01DefaultRegion\x01PG\x01T\x01M\x01null\x01null\x01\x010\x010\x010\x01\x01true\x02"
    # a SubBefore without keys still has 8 fields after Java's split (it writes "null", never a trailing "")
    line = encode([SubBeforeRecord(timestamp=1, group="G", request_id="R", msg_id="M")])[0]
    assert len(ref.java_split(line[:-1], "\x01")) == 8


def test_round_trip_of_every_record_kind_including_mqtt_extensions():
    mqtt_pub = PubRecord(timestamp=5, group=mqtt_group("dev-1"), topic="devices", msg_id="M1", tags="devices/d1/t",
                         store_host="127.0.0.1:10911", body_length=9, offset_msg_id="X", client_host="10.0.0.7",
                         mqtt_qos=1, mqtt_topic="devices/d1/t")
    mqtt_before = SubBeforeRecord(timestamp=6, group=mqtt_group("app"), request_id="R9", msg_id="M1", retry_times=1,
                                  client_id="app", mqtt_qos=1, mqtt_topic="devices/d1/t")
    mqtt_after = SubAfterRecord(request_id="R9", msg_id="M1", success=False,
                                context_code=int(DeliveryOutcome.EXPIRED.context_code), timestamp=7,
                                group=mqtt_group("app"), outcome=DeliveryOutcome.EXPIRED)
    records = [PUB, BEFORE, AFTER, END, mqtt_pub, mqtt_before, mqtt_after]
    body, _ = encode(records)
    assert decode(body) == records
    assert decode(body.encode()) == records
    # the reference layout reads the MQTT records too (extension fields come after its fields)
    seen = ref.read(body)
    assert [r["type"] for r in seen] == ["Pub", "SubBefore", "SubAfter", "EndTransaction", "Pub", "SubBefore", "SubAfter"]
    assert seen[4]["groupName"] == "%MQTT%dev-1" and seen[4]["clientHost"] == "10.0.0.7"
    assert seen[6]["contextCode"] == int(ConsumeReturnType.TIME_OUT)


def test_separator_characters_inside_values_cannot_break_the_record():
    r = PubRecord(timestamp=1, group="PG", topic="T", msg_id="M", tags="a\x01b\x02c")
    body, _ = encode([r])
    assert body.count("\x02") == 1 and len(ref.java_split(body[:-1], "\x01")) == 14
    assert decode(body)[0].tags == "a b c"


def test_unknown_or_malformed_records_are_skipped_by_decode_and_refused_by_decode_strict():
    good, _ = encode([PUB])
    noisy = "Recall\x011\x01R\x01G\x01T\x01M\x01true\x02" + good + "Pub\x01notanumber\x02" + "garbage" + "\x02\x02"
    assert decode(noisy) == [PUB]
    with pytest.raises(TraceFormatError, match="Recall"):
        decode_strict(noisy)
    with pytest.raises(TraceFormatError, match="timestamp"):
        decode_strict("Pub\x01x\x01R\x01G\x01T\x01M\x01t\x01k\x01h\x011\x011\x010\x01o\x01true\x02")
    with pytest.raises(TraceFormatError, match="fields"):
        decode_strict("SubBefore\x011\x02")
    with pytest.raises(ValueError):
        EndTransactionRecord(timestamp=1, group="G", topic="T", msg_id="M", transaction_id="X", transaction_state="DONE")


def test_a_batch_is_cut_into_messages_below_the_size_limit_each_with_its_own_keys():
    records = [PubRecord(timestamp=i, group="PG", topic="T", msg_id=f"ID{i}", tags="x" * 100) for i in range(50)]
    bodies = TraceBatch(max_size=1000).add_all(records)
    assert len(bodies) > 1
    assert all(len(b) < 1000 + 200 for b, _ in bodies)
    assert [r for b, _ in bodies for r in decode(b)] == records
    assert [k for _, keys in bodies for k in keys] == [f"ID{i}" for i in range(50)]


text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.builds(PubRecord, timestamp=st.integers(0, 2**62), group=text, topic=text, msg_id=text, tags=text,
                          keys=text, store_host=text, body_length=st.integers(0, 2**31), cost_ms=st.integers(0, 2**31),
                          msg_type=st.sampled_from(MessageType), offset_msg_id=text, success=st.booleans()),
                max_size=5))
def test_fuzz_encoded_records_always_read_back_by_the_reference_layout(records):
    body, _ = encode(records)
    assert len(ref.read(body)) == len(records)
    assert len(decode(body)) == len(records)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="\x01\x02PubSbAfterEndTransaction0123456789xnull", max_size=200))
def test_fuzz_decode_never_raises_anything_but_trace_format_error(data):
    decode(data)
    try:
        decode_strict(data)
    except TraceFormatError:
        pass


def test_records_as_the_java_client_writes_them_are_read():
    # Pub without clientHost (14 fields), SubBefore with null keys, SubAfter of 9 fields ending with the group,
    # and a SubAfter of the cloud channel (7 fields, then an empty one Java's split drops)
    java = ("Pub\x011700000000000\x01DefaultRegion\x01PG\x01Orders\x01AB12\x01null\x01null\x01"
            "10.0.0.5:10911\x0111\x012\x010\x01C0A8000100002A9F0000000000001000\x01true\x02"
            "SubBefore\x011700000000100\x01DefaultRegion\x01CG\x01REQ\x01AB12\x010\x01null\x02"
            "SubAfter\x01REQ\x01AB12\x013\x01true\x01null\x010\x011700000000103\x01CG\x02"
            "SubAfter\x01REQ2\x01AB12\x013\x01false\x01null\x012\x01\x02")
    pub, before, after, cloud = decode_strict(java)
    assert (pub.group, pub.msg_id, pub.tags, pub.keys, pub.client_host, pub.success) == ("PG", "AB12", None, None, None, True)
    assert pub.offset_msg_id == "C0A8000100002A9F0000000000001000" and pub.body_length == 11
    assert (before.group, before.request_id, before.keys, before.client_id) == ("CG", "REQ", None, None)
    assert (after.group, after.timestamp, after.cost_ms, after.outcome) == ("CG", 1700000000103, 3, None)
    assert (cloud.success, cloud.context_code, cloud.group) == (False, 2, None)


def test_java_reads_every_record_kind_we_write():
    """A JVM splits and parses our records with Java's own String.split and number parsing."""
    import base64
    import shutil
    import subprocess

    java = shutil.which("java")
    assert java, "java is not installed (make test installs it)"
    mqtt_after = SubAfterRecord(request_id="R9", msg_id="M1", success=False, context_code=1, timestamp=7,
                                group=mqtt_group("app"), outcome=DeliveryOutcome.EXPIRED)
    mqtt_pub = PubRecord(timestamp=5, group=mqtt_group("dev-1"), topic="devices", msg_id="M1", client_host="dev-1",
                         mqtt_qos=1, mqtt_topic="devices/d1/t")
    empty_keys = SubBeforeRecord(timestamp=1, group="G", request_id="R", msg_id="M", keys="")
    body, _ = encode([PUB, BEFORE, AFTER, END, mqtt_pub, mqtt_after, empty_keys])
    src = Path(__file__).parent / "java" / "TraceLayout.java"
    proc = subprocess.run([java, str(src)], input=base64.b64encode(body.encode()).decode() + "\n",
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [dict(kv.split("=", 1) for kv in line.split("\t")[1:]) | {"type": line.split("\t")[0]}
            for line in proc.stdout.splitlines()]
    assert [r["type"] for r in rows] == ["Pub", "SubBefore", "SubAfter", "EndTransaction", "Pub", "SubAfter",
                                         "SubBefore"]
    assert rows[0]["clientHost"] == "127.0.0.1@1" and rows[0]["offsetMsgId"] == PUB.offset_msg_id
    assert rows[1]["retryTimes"] == "2" and rows[2]["contextCode"] == "4" and rows[2]["groupName"] == "CG"
    assert rows[3]["transactionState"] == "COMMIT_MESSAGE" and rows[3]["fromTransactionCheck"] == "true"
    assert rows[4]["clientHost"] == "dev-1" and rows[4]["groupName"] == "%MQTT%dev-1"
    assert rows[5]["contextCode"] == "1" and rows[5]["groupName"] == "%MQTT%app"
    assert rows[6]["keys"] == "null"   # an empty key list is written as Java writes a null one
