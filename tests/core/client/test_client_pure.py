"""Pure parts of the client: allocation, selectors, routes, UNIQ_KEY, process queue offsets."""

import pytest

from core.client.allocate import allocate_average
from core.client.ids import UniqKeyFactory
from core.client.model import Message, MessageExt, MessageQueue
from core.client.process_queue import ProcessQueue
from core.client.route import TopicRoute
from core.client.selector import java_hash, select_by_hash


@pytest.mark.parametrize("queues,members,expected", [
    (8, 3, [[0, 1, 2], [3, 4, 5], [6, 7]]),      # Java AllocateMessageQueueAveragely
    (4, 2, [[0, 1], [2, 3]]),
    (4, 3, [[0, 1], [2], [3]]),
    (2, 3, [[0], [1], []]),
    (0, 2, [[], []]),
])
def test_allocate_average(queues, members, expected):
    ids = [f"10.0.0.{i}@x" for i in range(members)]
    assert [allocate_average(m, list(range(queues)), ids) for m in ids] == expected
    assert allocate_average("stranger", list(range(queues)), ids) == []


def test_java_hash_matches_java():
    assert java_hash("hello") == 99162322                 # "hello".hashCode()
    assert java_hash(7) == 7 and java_hash(-7) == -7      # Integer.hashCode()
    assert java_hash(15103111039) == -2076758148          # Long.hashCode(): (int)(v ^ (v >>> 32))
    qs = [MessageQueue("T", "b", i) for i in range(4)]
    assert select_by_hash(qs, Message("T", b"x"), -7).queue_id == 3  # Math.abs(-7 % 4)


def test_route_publish_and_subscribe_queues():
    doc = {"brokerDatas": [{"brokerAddrs": {"0": "10.0.0.2:10911"}, "brokerName": "b", "cluster": "C"},
                           {"brokerAddrs": {"0": "10.0.0.1:10911", "1": "10.0.0.9:10911"}, "brokerName": "a", "cluster": "C"},
                           {"brokerAddrs": {"1": "10.0.0.3:10911"}, "brokerName": "c", "cluster": "C"}],
           "queueDatas": [{"brokerName": "b", "perm": 6, "readQueueNums": 2, "writeQueueNums": 2},
                          {"brokerName": "a", "perm": 4, "readQueueNums": 1, "writeQueueNums": 1},
                          {"brokerName": "c", "perm": 6, "readQueueNums": 1, "writeQueueNums": 1}]}
    r = TopicRoute.from_json("T", doc)
    assert [str(q) for q in r.publish_queues()] == ["T@b:0", "T@b:1"]  # a is read-only, c has no master
    assert [str(q) for q in r.subscribe_queues()] == ["T@a:0", "T@b:0", "T@b:1", "T@c:0"]
    assert r.broker_addrs() == {"a": "10.0.0.1:10911", "b": "10.0.0.2:10911"}
    assert [q.write_queue_nums for q in r.for_new_topic("N", 1).queue_datas] == [1, 1, 1]
    ordered = TopicRoute.from_json("T", {**doc, "orderTopicConf": "a:2;b:1"})
    assert [str(q) for q in ordered.publish_queues()] == ["T@a:0", "T@a:1", "T@b:0"]


def test_uniq_keys_are_32_hex_and_distinct():
    f = UniqKeyFactory("10.1.2.3")
    keys = [f.new() for _ in range(1000)]
    assert len(set(keys)) == 1000
    assert all(len(k) == 32 and k == k.upper() and k.startswith("0A010203") for k in keys)


def _ext(offset):
    return MessageExt(topic="T", body=b"", queue=MessageQueue("T", "b", 0), queue_offset=offset, commit_log_offset=0,
                      flag=0, sysflag=0, born_timestamp=0, born_host=b"", store_timestamp=0, store_host=b"",
                      reconsume_times=0)


def test_process_queue_commits_only_past_acknowledged():
    pq = ProcessQueue()
    m = [_ext(i) for i in range(10, 14)]
    pq.pulled_to = 20  # offsets 14..19 were filtered out by tag
    pq.put(m)
    assert pq.remove([m[1], m[2]]) == 10   # 10 still in the listener
    assert pq.remove([m[0]]) == 13
    assert pq.remove([m[3]]) == 20         # nothing held: everything below pulled_to is done
    assert pq.put([_ext(13)]) and pq.committable() == 13  # a re-pull after an offset reset
    taken = pq.take(1)
    pq.give_back(taken)
    assert taken[0].reconsume_times == 1 and pq.available() == 1
