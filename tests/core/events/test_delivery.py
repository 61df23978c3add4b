"""Event rules end to end in one process: a real broker, name server and remoting (tests/support/cluster),
real consumer groups, a real webhook receiver; PutEvents through `EventService.put_events`.

Retries use the cluster's short delay levels (level 3 = 300 ms), so a retry takes a fraction of a second.
"""

import json

import trio
import trio.testing

from cluster import broker_cluster
from webhook import WebhookReceiver

from core.events import EventService, events_from_http
from core.events.registry import Registry

HOT = {"data": {"temp": [{"numeric": [">", 30]}], "building": ["A"]}}


def event(i: int, temp: float, building: str = "A", subject: str | None = None) -> dict:
    return events_from_http({"content-type": "application/cloudevents+json"}, json.dumps(
        {"specversion": "1.0", "id": f"ev-{i}", "source": "devices", "type": "telemetry",
         "subject": subject or f"{building}/dev-{i}", "data": {"temp": temp, "building": building}}).encode())[0]


async def dlq_messages(broker, topic: str, n: int, timeout: float = 15.0) -> list:
    with trio.fail_after(timeout):
        while broker.max_offset(topic, 0) < n:
            await trio.sleep(0.05)
    result = await broker.read_queue(topic, 0, 0, 32)
    return result.messages()


async def wait_counts(service, key: str, field: str, n: int, timeout: float = 15.0) -> None:
    with trio.fail_after(timeout):
        while getattr(service.counts[key], field) < n:
            await trio.sleep(0.02)


async def test_matching_events_reach_the_webhook_transformed_and_others_do_not(tmp_path, nursery):
    hook = WebhookReceiver()
    await nursery.start(hook.run)
    async with broker_cluster(nursery, tmp_path) as c:
        service = await nursery.start(EventService(c.broker, [c.namesrv]).run)
        await service.create_bus({"name": "iot"})
        await service.create_rule({"name": "hot", "bus": "iot", "pattern": HOT,
                                   "transform": {"form": "TEMPLATE", "value": {"t": "$.data.temp", "d": "$.subject"},
                                                 "template": '{"device": "${d}", "temperature": ${t}}'},
                                   "targets": [{"type": "http", "url": hook.url, "headers": {"X-Token": "s3"}}]})
        await service.put_events("iot", [event(1, 25.0), event(2, 35.5), event(3, 40.0, "B"), event(4, 31.0)])
        got = await hook.wait_for("received", 2)
        await wait_counts(service, "iot/hot", "delivered", 2)
        bodies = sorted((json.loads(b) for _, b in got), key=lambda d: d["device"])
        assert bodies == [{"device": "A/dev-2", "temperature": 35.5}, {"device": "A/dev-4", "temperature": 31.0}]
        headers = got[0][0]
        assert headers["ce-source"] == "devices" and headers["ce-specversion"] == "1.0"
        assert headers["x-token"] == "s3" and headers["content-type"] == "application/json"
        assert service.counts["iot/hot"].matched == 2 and service.counts["iot/hot"].failed == 0
        nursery.cancel_scope.cancel()


async def test_a_webhook_failing_three_times_then_succeeding_gets_the_event_once(tmp_path, nursery):
    hook = WebhookReceiver(fail_first=3)
    await nursery.start(hook.run)
    async with broker_cluster(nursery, tmp_path) as c:
        service = await nursery.start(EventService(c.broker, [c.namesrv]).run)
        await service.create_bus({"name": "iot"})
        await service.create_rule({"name": "all", "bus": "iot", "maxRetries": 5,
                                   "targets": [{"type": "http", "url": hook.url, "mode": "structured"}]})
        await service.put_events("iot", [event(1, 50.0)])
        await wait_counts(service, "iot/all", "delivered", 1)
        assert len(hook.attempts) == 4 and len(hook.received) == 1
        body = json.loads(hook.received[0][1])
        assert body["id"] == "ev-1" and body["data"] == {"temp": 50.0, "building": "A"}
        assert hook.received[0][0]["content-type"] == "application/cloudevents+json"
        counts = service.counts["iot/all"]
        assert (counts.delivered, counts.failed, counts.dead_lettered) == (1, 3, 0)
        nursery.cancel_scope.cancel()


async def test_an_always_failing_webhook_dead_letters_the_event_with_the_reason(tmp_path, nursery):
    hook = WebhookReceiver(always_fail=True)
    await nursery.start(hook.run)
    async with broker_cluster(nursery, tmp_path) as c:
        service = await nursery.start(EventService(c.broker, [c.namesrv]).run)
        await service.create_bus({"name": "iot"})
        await service.create_rule({"name": "doomed", "bus": "iot", "maxRetries": 2,
                                   "targets": [{"type": "http", "url": hook.url}]})
        await service.put_events("iot", [event(7, 50.0)])
        [dead] = await dlq_messages(c.broker, "MQGATE_EVENTDLQ_iot_doomed", 1)
        assert json.loads(dead.body)["id"] == "ev-7"
        assert dead.properties["EVENT_FAILURE_REASON"] == f"webhook {hook.url}: HTTP 503 Service Unavailable"
        assert dead.properties["EVENT_RULE"] == "iot/doomed" and dead.properties["EVENT_ATTEMPTS"] == "3"
        await wait_counts(service, "iot/doomed", "dead_lettered", 1)
        assert len(hook.attempts) == 3 and service.counts["iot/doomed"].failed == 3
        nursery.cancel_scope.cancel()


async def test_a_rule_added_at_runtime_applies_to_events_put_after_it_and_survives_a_service_restart(
        tmp_path, nursery):
    async with broker_cluster(nursery, tmp_path) as c:
        with trio.CancelScope() as first:
            service = await nursery.start(EventService(c.broker, [c.namesrv]).run)
            await service.create_bus({"name": "iot"})
            await service.put_events("iot", [event(1, 99.0)])  # before the rule: never delivered
            await service.create_rule({"name": "copy", "bus": "iot", "pattern": HOT,
                                       "targets": [{"type": "topic", "topic": "HotEvents", "tag": "hot",
                                                    "keys": "$.subject"}]})
            await service.put_events("iot", [event(2, 35.0), event(3, 20.0)])
            await wait_counts(service, "iot/copy", "delivered", 1)
            await service.set_enabled("iot", "copy", False)
            await service.write_counts()
        first.cancel()
        # the definitions are records in the store: a new service over the same broker has them
        again = await nursery.start(EventService(c.broker, [c.namesrv]).run)
        assert set(again.buses) == {"iot"} and not again.rules["iot/copy"].enabled
        assert again.counts["iot/copy"].delivered == 1
        await again.set_enabled("iot", "copy", True)
        await again.put_events("iot", [event(4, 45.0)])
        await wait_counts(again, "iot/copy", "delivered", 2)
        msgs = []
        for qid in range(c.broker.get_topic("HotEvents").read_queue_nums):
            msgs += (await c.broker.read_queue("HotEvents", qid, 0, 32)).messages()
        assert sorted(json.loads(m.body)["id"] for m in msgs) == ["ev-2", "ev-4"]
        assert {m.properties["TAGS"] for m in msgs} == {"hot"} and msgs[0].properties["KEYS"].startswith("A/dev-")
        state = await Registry(c.broker).load()
        assert ("rule", "iot/copy") in state and ("bus", "iot") in state
        nursery.cancel_scope.cancel()


async def test_an_ordered_rule_keeps_the_order_of_a_subject_through_failures(tmp_path, nursery):
    hook = WebhookReceiver(fail_first=2)
    await nursery.start(hook.run)
    async with broker_cluster(nursery, tmp_path) as c:
        service = await nursery.start(EventService(c.broker, [c.namesrv], orderly_suspend_ms=50).run)
        await service.create_bus({"name": "iot"})
        await service.create_rule({"name": "seq", "bus": "iot", "ordered": True,
                                   "transform": {"form": "JSONPATH", "value": "$.id"},
                                   "targets": [{"type": "http", "url": hook.url}]})
        await service.put_events("iot", [event(i, 20.0, subject="dev-1") for i in range(1, 6)])
        got = await hook.wait_for("received", 5)
        assert [b for _, b in got] == [b"ev-1", b"ev-2", b"ev-3", b"ev-4", b"ev-5"]
        assert [b for _, b in hook.attempts[:3]] == [b"ev-1", b"ev-1", b"ev-1"]  # the head holds the rest back
        nursery.cancel_scope.cancel()


async def test_a_slow_webhook_holds_only_its_own_slots_and_never_another_rule(tmp_path, nursery):
    release = trio.Event()
    slow = WebhookReceiver(hold=release)
    await nursery.start(slow.run)
    async with broker_cluster(nursery, tmp_path) as c:
        service = await nursery.start(EventService(c.broker, [c.namesrv]).run)
        await service.create_bus({"name": "iot"})
        await service.create_rule({"name": "slow", "bus": "iot", "concurrency": 8,
                                   "targets": [{"type": "http", "url": slow.url, "timeout": 60, "concurrency": 2}]})
        await service.create_rule({"name": "fast", "bus": "iot", "targets": [{"type": "topic", "topic": "Fast"}]})
        await service.put_events("iot", [event(i, 20.0) for i in range(6)])
        await wait_counts(service, "iot/fast", "delivered", 6)
        await slow.wait_for("attempts", 2)
        await trio.testing.wait_all_tasks_blocked()
        assert len(slow.attempts) == 2 and service.counts["iot/slow"].delivered == 0  # its 2 slots, no more
        release.set()
        await wait_counts(service, "iot/slow", "delivered", 6)
        assert len(slow.received) == 6
        nursery.cancel_scope.cancel()
