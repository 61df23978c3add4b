"""Lite-topic subscriptions (`core.proxy.lite`): the actions, the quota, bad names."""

import pytest

from core.proxy import lite, pb
from core.proxy.wire import WireError, lite_queue


def test_actions_add_remove_replace_and_clear_one_client_s_set():
    subs = lite.LiteSubscriptions()
    subs.sync("c1", "G", "T", pb.PARTIAL_ADD, ["a", "b"])
    subs.sync("c2", "G", "T", pb.PARTIAL_ADD, ["c"])
    assert subs.queues("G", "T") == [lite_queue("T", n) for n in "abc"]
    subs.sync("c1", "G", "T", pb.PARTIAL_REMOVE, ["a"])
    assert subs.queues("G", "T") == [lite_queue("T", n) for n in "bc"]
    subs.sync("c1", "G", "T", pb.COMPLETE_ADD, ["x"])
    assert subs.queues("G", "T") == [lite_queue("T", n) for n in "cx"]
    subs.sync("c2", "G", "T", pb.COMPLETE_REMOVE, [])
    assert not subs.has("c2", "G", "T") and subs.has("c1", "G", "T")
    assert subs.queues("H", "T") == [] and subs.queues("G", "U") == []
    subs.forget("c1")
    assert subs.queues("G", "T") == []


def test_a_bad_name_refuses_the_whole_request_and_the_quota_holds(monkeypatch):
    subs = lite.LiteSubscriptions()
    with pytest.raises(WireError) as e:
        subs.sync("c1", "G", "T", pb.PARTIAL_ADD, ["ok", "no,comma"])
    assert e.value.code == pb.ILLEGAL_LITE_TOPIC
    with pytest.raises(WireError):
        subs.sync("c1", "G", "T", pb.PARTIAL_ADD, ["x" * 65])
    assert subs.queues("G", "T") == []
    monkeypatch.setattr(lite, "QUOTA", 2)
    subs.sync("c1", "G", "T", pb.PARTIAL_ADD, ["a", "b"])
    with pytest.raises(WireError) as e:
        subs.sync("c1", "G", "T", pb.PARTIAL_ADD, ["c"])
    assert e.value.code == pb.LITE_SUBSCRIPTION_QUOTA_EXCEEDED
    assert subs.queues("G", "T") == [lite_queue("T", "a"), lite_queue("T", "b")]
