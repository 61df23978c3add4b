"""`Broker.send_many`: every message checked, stamped, hooked and encoded, then
all appended together; results in input order; stored hooks per hooked message.

Real store files in tmp_path; the put and stored hooks are the test's own
(the public extension API).
"""

from __future__ import annotations

from collections import Counter


from core.broker import FlushDiskType, SendResult, SendStatus, TopicConfig, open_broker
from core.store import StoreConfig
from core.store.message import Message, decode_message, parse_offset_msg_id

OK = SendStatus.SEND_OK
MAX_BODY = 1000


def msg(topic: str, body: bytes, **props: str) -> Message:
    return Message(topic=topic, body=body, properties=dict(props))


def refuse_marked(msg: Message) -> SendResult | None:
    """A put hook: refuses the messages marked REFUSE=yes."""
    if msg.properties.get("REFUSE") == "yes":
        return SendResult(SendStatus.NO_PERMISSION, topic=msg.topic, remark="refused by the test hook")
    return None


async def queue_bodies(broker, topic: str, queue_id: int) -> list[bytes]:
    got = await broker.read_queue(topic, queue_id, 0, 1000)
    return [m.body for m in got.messages()]


def log_entries(broker) -> list:
    """Every entry of the commit log, in order (walks it entry by entry)."""
    out = []
    pos = broker.store.min_phy_offset
    end = broker.store.max_phy_offset
    while pos < end:
        raw = broker.store.read_at(pos)
        if raw is None:  # blank end of a segment: go to the next one
            seg = broker.store.config.mapped_file_size_commit_log
            pos = (pos // seg + 1) * seg
            continue
        out.append(decode_message(raw))
        pos += len(raw)
    return out


# The mixed batch: (message, queue id) and what each one must answer.
def mixed_batch() -> list[tuple[Message, int | None]]:
    return [
        (msg("A", b"a-1"), 0),                           # 0 existing topic
        (msg("B", b"b-1"), 0),                           # 1 another existing topic
        (msg("New", b"n-1"), None),                      # 2 auto-created (TBW102), round robin -> queue 0
        (msg("A", b"refuse-me", REFUSE="yes"), 0),       # 3 refused by the put hook
        (msg("A", b"bad-queue"), 7),                     # 4 illegal queue id (A has 2)
        (msg("B", b"x" * (MAX_BODY + 1)), 0),            # 5 body over maxMessageSize
        (msg("A", b"a-2"), 0),                           # 6
        (msg("B", b"b-2"), 0),                           # 7
        (msg("New", b"n-2"), None),                      # 8 now known, round robin -> queue 1
        (msg("A", b"a-3"), 1),                           # 9
    ]


EXPECTED_STATUS = [OK, OK, OK, SendStatus.NO_PERMISSION, SendStatus.SYSTEM_ERROR, SendStatus.MESSAGE_ILLEGAL,
                   OK, OK, OK, OK]
# (topic, queue id, queue offset) of the stored ones; A/0 already holds one message
EXPECTED_PLACE = {0: ("A", 0, 1), 1: ("B", 0, 0), 2: ("New", 0, 0), 6: ("A", 0, 2), 7: ("B", 0, 1),
                  8: ("New", 1, 0), 9: ("A", 1, 0)}
HOOKED = [0, 1, 2, 3, 6, 7, 8, 9]  # went through the put hooks (4 and 5 were refused before them)


async def setup_topics(broker) -> None:
    await broker.update_topic(TopicConfig("A", 2, 2))
    await broker.update_topic(TopicConfig("B", 1, 1))
    assert broker.get_topic("New") is None
    assert (await broker.send(msg("A", b"before"), queue_id=0)).queue_offset == 0


async def test_mixed_batch_results_in_input_order(broker_config, store_config):
    async with open_broker(broker_config.replace(max_message_size=MAX_BODY), store_config) as broker:
        await setup_topics(broker)
        put_seen = []
        broker.add_put_hook(lambda m: put_seen.append(bytes(m.body)))
        broker.add_put_hook(refuse_marked)
        items = mixed_batch()
        results = await broker.send_many(items)

        assert [r.status for r in results] == EXPECTED_STATUS
        assert [r.ok for r in results] == [s is OK for s in EXPECTED_STATUS]
        assert results[3].remark == "refused by the test hook"
        assert "illegal" in results[4].remark and "maxMessageSize" in results[5].remark
        for i, (topic, qid, qoff) in EXPECTED_PLACE.items():
            r = results[i]
            assert (r.topic, r.queue_id, r.queue_offset, r.msg_count) == (topic, qid, qoff, 1), i
            assert r.uniq_key == items[i][0].properties["UNIQ_KEY"] and len(r.uniq_key) == 32
        # the put hooks ran for the hooked ones only, in input order
        assert put_seen == [bytes(items[i][0].body) for i in HOOKED]

        # auto-created from TBW102 with the default queue count
        new = broker.get_topic("New")
        assert new is not None and new.write_queue_nums == new.read_queue_nums == 4

        # stored ones are readable with consecutive queue offsets
        assert await queue_bodies(broker, "A", 0) == [b"before", b"a-1", b"a-2"]
        assert await queue_bodies(broker, "A", 1) == [b"a-3"]
        assert await queue_bodies(broker, "B", 0) == [b"b-1", b"b-2"]
        assert await queue_bodies(broker, "New", 0) == [b"n-1"]
        assert await queue_bodies(broker, "New", 1) == [b"n-2"]
        got = await broker.read_queue("A", 0, 0)
        assert got.queue_offsets == [0, 1, 2] and [m.queue_offset for m in got.messages()] == [0, 1, 2]
        for i, (topic, qid, qoff) in EXPECTED_PLACE.items():
            assert broker.max_offset(topic, qid) >= qoff + 1

        # the refused ones are stored nowhere: the log holds exactly the 8 others, in send order
        entries = log_entries(broker)
        assert [e.body for e in entries] == [b"before"] + [bytes(items[i][0].body) for i in EXPECTED_PLACE]
        assert [e.physical_offset for e in entries[1:]] == [results[i].physical_offset for i in EXPECTED_PLACE]
        # stored entries are the messages the sender gave, stamped by the broker
        for i in EXPECTED_PLACE:
            e = next(e for e in entries if e.physical_offset == results[i].physical_offset)
            assert e.properties["UNIQ_KEY"] == results[i].uniq_key
            assert e.properties["CLUSTER"] == broker_config.broker_cluster_name
            assert e.store_timestamp == results[i].store_timestamp


async def test_stored_hooks_hear_each_hooked_message_once(broker_config, store_config):
    async with open_broker(broker_config.replace(max_message_size=MAX_BODY), store_config) as broker:
        await setup_topics(broker)
        broker.add_put_hook(refuse_marked)
        heard = []

        def stored(m: Message, r: SendResult) -> None:
            if r.ok:  # right after the append: the entry is already in its queue
                assert broker.max_offset(m.topic, r.queue_id) > r.queue_offset
            heard.append((bytes(m.body), r.ok, r.status))

        broker.add_stored_hook(stored)
        items = mixed_batch()
        results = await broker.send_many(items)
        assert [r.status for r in results] == EXPECTED_STATUS

        want = [(bytes(items[i][0].body), EXPECTED_STATUS[i] is OK, EXPECTED_STATUS[i]) for i in HOOKED]
        # exactly once each, none for the two refused before the hooks
        assert Counter(heard) == Counter(want) and len(heard) == 8
        assert (b"bad-queue", False, SendStatus.SYSTEM_ERROR) not in heard
        assert not any(body.startswith(b"xxx") for body, _, _ in heard)
        assert (b"refuse-me", False, SendStatus.NO_PERMISSION) in heard
        # the stored ones in send order
        assert [h for h in heard if h[1]] == [w for w in want if w[1]]


async def test_stored_hooks_run_in_send_order(broker_config, store_config):
    """add_stored_hook promises send order for every message whose put hooks
    ran, a message refused by a put hook in the middle of the batch included
    (it was once reported while preparing, before the messages ahead of it)."""
    async with open_broker(broker_config.replace(max_message_size=MAX_BODY), store_config) as broker:
        await setup_topics(broker)
        broker.add_put_hook(refuse_marked)
        heard = []
        broker.add_stored_hook(lambda m, r: heard.append((bytes(m.body), r.ok)))
        items = mixed_batch()
        await broker.send_many(items)
        assert heard == [(bytes(items[i][0].body), EXPECTED_STATUS[i] is OK) for i in HOOKED]


async def test_stored_hooks_hear_a_message_the_store_refuses(broker_config, store_config):
    # the body is within maxMessageSize, the stored entry (header, topic, properties) is not
    async with open_broker(broker_config.replace(max_message_size=MAX_BODY), store_config) as broker:
        await broker.update_topic(TopicConfig("T", 1, 1))
        heard = []
        broker.add_stored_hook(lambda m, r: heard.append((bytes(m.body[:4]), r.status)))
        results = await broker.send_many([(msg("T", b"one"), 0), (msg("T", b"big!" + b"x" * (MAX_BODY - 4)), 0),
                                          (msg("T", b"two"), 0)])
        assert [r.status for r in results] == [OK, SendStatus.MESSAGE_ILLEGAL, OK]
        assert [r.queue_offset for r in (results[0], results[2])] == [0, 1]
        assert results[1].msg_id == "" and results[1].physical_offset == -1
        assert heard == [(b"one", OK), (b"big!", SendStatus.MESSAGE_ILLEGAL), (b"two", OK)]
        assert await queue_bodies(broker, "T", 0) == [b"one", b"two"]


async def test_msg_ids_resolve_and_look_like_single_sends(broker_config, store_config):
    async with open_broker(broker_config, store_config) as broker:
        await broker.update_topic(TopicConfig("A", 2, 2))
        single = await broker.send(msg("A", b"single"), queue_id=0)
        assert single.ok and len(single.msg_id) == 32
        results = await broker.send_many([(msg("A", b"m%d" % i), i % 2) for i in range(6)]
                                         + [(msg("Other", b"auto"), None)])
        assert all(r.status is OK for r in results)
        ids = [r.msg_id for r in results]
        assert len(set(ids + [single.msg_id])) == 8
        host, phys = parse_offset_msg_id(single.msg_id)
        assert host == broker.store_host and phys == single.physical_offset
        for i, r in enumerate(results):
            body = b"m%d" % i if i < 6 else b"auto"
            assert len(r.msg_id) == 32 and r.msg_id == r.msg_id.upper()
            int(r.msg_id, 16)
            assert r.msg_id[:16] == single.msg_id[:16]  # the same store host part (IPv4: ip + port)
            assert parse_offset_msg_id(r.msg_id) == (broker.store_host, r.physical_offset)
            assert r.msg_ids == [r.msg_id]
            viewed = await broker.view_message(r.msg_id)
            assert viewed is not None and viewed.body == body and viewed.msg_id == r.msg_id
            assert (viewed.topic, viewed.queue_id, viewed.queue_offset) == (r.topic, r.queue_id, r.queue_offset)
            raw = broker.store.read_by_msg_id(r.msg_id)
            assert raw == await broker.read_at(r.physical_offset) and decode_message(raw).body == body
        # the pulled message names the same id
        got = await broker.read_queue("A", 1, 0)
        assert [m.msg_id for m in got.messages()] == [ids[1], ids[3], ids[5]]


async def test_put_hook_rewrites_keep_the_senders_topic_in_results(broker_config, store_config):
    async with open_broker(broker_config, store_config) as broker:
        await broker.update_topic(TopicConfig("Real", 2, 2))
        await broker.ensure_topic("Parked", 2)

        def park(m: Message) -> None:
            if m.properties.get("LATER"):
                m.properties["REAL_TOPIC"], m.properties["REAL_QID"] = m.topic, str(m.queue_id)
                m.topic, m.queue_id = "Parked", 1

        broker.add_put_hook(park)
        heard = []
        broker.add_stored_hook(lambda m, r: heard.append((m.topic, r.topic, r.queue_id)))
        results = await broker.send_many([(msg("Real", b"now"), 1), (msg("Real", b"later", LATER="1"), 1),
                                          (msg("Real", b"now2"), 1)])
        assert all(r.ok for r in results)
        assert [(r.topic, r.queue_id) for r in results] == [("Real", 1)] * 3
        assert [results[0].queue_offset, results[2].queue_offset] == [0, 1]
        assert await queue_bodies(broker, "Real", 1) == [b"now", b"now2"]
        [parked] = (await broker.read_queue("Parked", 1, 0)).messages()
        assert parked.body == b"later" and parked.properties["REAL_TOPIC"] == "Real"
        assert (await broker.view_message(results[1].msg_id)).topic == "Parked"
        assert heard == [("Real", "Real", 1), ("Parked", "Real", 1), ("Real", "Real", 1)]


async def test_sync_flush_batch_is_durable_when_answered(broker_config, store_config):
    config = broker_config.replace(flush_disk_type=FlushDiskType.SYNC_FLUSH, max_message_size=MAX_BODY)
    async with open_broker(config, store_config) as broker:
        await broker.update_topic(TopicConfig("T", 2, 2))
        results = await broker.send_many([(msg("T", b"a"), 0), (msg("T", b"b"), 5), (msg("T", b"c"), 1)])
        assert [r.status for r in results] == [OK, SendStatus.SYSTEM_ERROR, OK]
        last = max(r.physical_offset for r in results if r.ok)
        assert broker.flushed_offset > last


async def test_a_batch_across_commit_log_segments(broker_config, tmp_path):
    segment = 4096
    store_config = StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=segment,
                               mapped_file_size_consume_queue=20 * 64, max_hash_slot_num=64, max_index_num=512)

    def body(i: int) -> bytes:
        return bytes([97 + i % 26]) * (200 + 13 * i)

    n = 30
    async with open_broker(broker_config, store_config) as broker:
        await broker.update_topic(TopicConfig("S", 2, 2))
        await broker.send(msg("S", b"first"), queue_id=0)
        results = await broker.send_many([(msg("S", body(i)), i % 2) for i in range(n)])
        assert all(r.status is OK for r in results)
        phys = [r.physical_offset for r in results]
        assert phys == sorted(phys) and len({p // segment for p in phys}) >= 4
        assert [r.queue_offset for r in results] == [i // 2 + (1 - i % 2) for i in range(n)]
        want0 = [b"first"] + [body(i) for i in range(0, n, 2)]
        want1 = [body(i) for i in range(1, n, 2)]
        assert await queue_bodies(broker, "S", 0) == want0
        assert await queue_bodies(broker, "S", 1) == want1
        for i, r in enumerate(results):
            assert (await broker.view_message(r.msg_id)).body == body(i)

    async with open_broker(broker_config, store_config) as broker:  # the same files, reopened
        assert await queue_bodies(broker, "S", 0) == want0
        assert await queue_bodies(broker, "S", 1) == want1
        for i, r in enumerate(results):
            assert (await broker.view_message(r.msg_id)).body == body(i)


async def test_a_failing_stored_hook_does_not_starve_the_others(broker_config, store_config):
    """A stored hook that raises is logged; the next hooks still hear every
    message (a put hook may be holding state until it hears), and the send
    answers normally."""
    async with open_broker(broker_config.replace(max_message_size=MAX_BODY), store_config) as broker:
        await setup_topics(broker)
        broker.add_put_hook(refuse_marked)

        def broken(m, r):
            raise RuntimeError("a bug in a hook")

        heard = []
        broker.add_stored_hook(broken)
        broker.add_stored_hook(lambda m, r: heard.append((bytes(m.body), r.ok)))
        items = mixed_batch()
        results = await broker.send_many(items)
        assert [r.status for r in results] == EXPECTED_STATUS
        assert heard == [(bytes(items[i][0].body), EXPECTED_STATUS[i] is OK) for i in HOOKED]


async def test_a_stored_messages_result_is_the_dataclass_the_constructor_makes(broker_config, store_config):
    """Compiled, SEND_OK results are filled slot by slot (send_checks.pxd), not by
    the dataclass's ``__init__``: they compare, print, change and collect like one."""
    import gc

    async with open_broker(broker_config, store_config) as broker:
        await broker.update_topic(TopicConfig("A", 2, 2))
        results = await broker.send_many([(msg("A", b"m%d" % i), i % 2) for i in range(3)])
        for r in results:
            assert r.__class__ is SendResult and gc.is_tracked(r)
            same = SendResult(OK, "A", r.queue_id, r.queue_offset, r.uniq_key, r.physical_offset,
                              r.store_timestamp, 1, "", r._put)
            assert r == same and repr(r) == repr(same)
            assert (r.topic, r.msg_count, r.remark) == ("A", 1, "") and r.ok and r.msg_ids == [r.msg_id]
            r.status, r.remark = SendStatus.FLUSH_DISK_TIMEOUT, "flush to disk timed out"  # as `_await_durable` does
            assert r.ok and r.remark == "flush to disk timed out"
        del results, r, same
        gc.collect()
