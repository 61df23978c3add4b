"""``$delayed/<seconds>/<topic>``: the gateway on a broker with its timer
service, wired as ``gateway.serve`` does (the timer put hook first), over real
sockets and real clients.

What is checked: when the message comes (never early), that its RETAIN flag
acts on the real topic when it fires (also across a restart) and never under
``$delayed/...``, that a delay the broker refuses is answered without losing
the connection (3.1.1 and 5.0), and that an MQTT 5 message that expired while
parked is dropped and counted once.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

import paho.mqtt.client as paho
import trio

from core.broker import BrokerConfig, open_broker
from core.timers import TimerConfig, TimerMessageService
from gateway.app import MQTTGateway
from gateway.listeners import ListenerSpec
from gateway.mapping import now_ms
from gateway.mqtt import PingResp, PubAck, PubComp, PubRec, PubRel, Publish, ReasonCode, Subscription, Will

from .conftest import Client, small_store_config

MAX_DELAY_S = 60  # timerMaxDelaySec of these tests


@asynccontextmanager
async def timer_gateway(root, *, precision_ms: int = 100):
    """(broker, gateway, timer service, MQTT port), the timer service attached as ``gateway.serve`` does
    (firing starts once the gateway runs)."""
    cfg = BrokerConfig(default_topic_queue_nums=4, listen_port=0)
    async with open_broker(cfg, small_store_config(root)) as broker:
        timers = TimerMessageService(broker, TimerConfig(precision_ms=precision_ms, slots_total=3600,
                                                         timerlog_file_size=1 << 20, max_delay_s=MAX_DELAY_S))
        timers.install()
        broker.timers = timers
        async with trio.open_nursery() as nursery:
            gw = MQTTGateway(broker, {"sysInterval": 0})
            ports = await nursery.start(gw.run, [ListenerSpec(transport="tcp", ephemeral=True)])
            await nursery.start(timers.run)
            try:
                yield broker, gw, timers, ports["tcp"]
            finally:
                nursery.cancel_scope.cancel()


def delayed_retained(gw) -> list[str]:
    return [t for t in gw.retained.stored if t.startswith("$delayed")]


async def no_retained(client: Client, topic: str) -> None:
    """A new subscription to ``topic`` gets no retained message: its retained
    messages go out right after the SUBACK, before the answer to a later PINGREQ."""
    await client.subscribe(Subscription(topic_filter=topic, qos=1))
    await client.ping()
    await client.expect(PingResp)


async def retained(client: Client, topic: str) -> Publish:
    await client.subscribe(Subscription(topic_filter=topic, qos=1))
    m = await client.expect(Publish)
    await client.send(PubAck(packet_id=m.packet_id))
    return m


async def live(client: Client) -> Publish:
    m = await client.expect(Publish, timeout=10)
    if m.qos:
        await client.send(PubAck(packet_id=m.packet_id))
    return m


async def test_retained_delayed_publish_is_retained_on_its_topic_when_it_fires(tmp_path):
    async with timer_gateway(tmp_path / "s") as (broker, gw, timers, port):
        watch, _ = await Client.connect(port, "watch")
        await watch.subscribe(Subscription(topic_filter="r/u", qos=1, retain_as_published=True))
        p, _ = await Client.connect(port, "p")
        await p.publish("$delayed/2/r/u", b"hi", qos=1, retain=True)
        assert (await p.expect(PubAck)).reason_code == 0
        assert delayed_retained(gw) == [] and "r/u" not in gw.retained.stored
        early, _ = await Client.connect(port, "early")
        await no_retained(early, "r/u")
        m = await live(watch)  # fired: delivered with its RETAIN flag (retain as published)
        assert (m.topic, m.payload, m.retain) == ("r/u", b"hi", True)
        late, _ = await Client.connect(port, "late")
        m = await retained(late, "r/u")
        assert (m.topic, m.payload, m.retain) == ("r/u", b"hi", True)
        assert delayed_retained(gw) == []

        # an empty retained $delayed publish clears the topic when it fires, not before
        await p.publish("$delayed/1/r/u", b"", qos=1, retain=True)
        assert (await p.expect(PubAck)).reason_code == 0
        before, _ = await Client.connect(port, "before")
        assert (await retained(before, "r/u")).payload == b"hi"
        m = await live(watch)
        assert (m.topic, m.payload, m.retain) == ("r/u", b"", True)
        after, _ = await Client.connect(port, "after")
        await no_retained(after, "r/u")
        assert gw.retained.stored == {}


async def test_retained_delayed_publish_fires_after_a_restart(tmp_path):
    root = tmp_path / "s"
    async with timer_gateway(root) as (broker, gw, timers, port):
        p, _ = await Client.connect(port, "p", version=4)
        await p.publish("$delayed/2/r/v", b"kept", qos=1, retain=True)
        await p.expect(PubAck)
        assert delayed_retained(gw) == []
    async with timer_gateway(root) as (broker, gw, timers, port):
        assert delayed_retained(gw) == []
        watch, _ = await Client.connect(port, "watch")
        await watch.subscribe(Subscription(topic_filter="r/v", qos=1))
        assert (await live(watch)).payload == b"kept"
        late, _ = await Client.connect(port, "late")
        m = await retained(late, "r/v")
        assert (m.payload, m.retain) == (b"kept", True)
    async with timer_gateway(root) as (broker, gw, timers, port):  # the retained record was written
        again, _ = await Client.connect(port, "again")
        assert (await retained(again, "r/v")).payload == b"kept"
        assert list(gw.retained.stored) == ["r/v"]


async def test_delay_over_the_maximum_311_acknowledged_and_dropped_connection_kept(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="mqgate")
    async with timer_gateway(tmp_path / "s") as (broker, gw, timers, port):
        watch, _ = await Client.connect(port, "watch")
        await watch.subscribe(Subscription(topic_filter="z", qos=1))
        c, _ = await Client.connect(port, "old", version=4, clean_start=False)
        await c.publish(f"$delayed/{MAX_DELAY_S + 1}/z", b"never", qos=1)
        assert isinstance(await c.expect(PubAck), PubAck)
        pid = await c.publish(f"$delayed/{MAX_DELAY_S + 1}/z", b"never", qos=2)
        assert (await c.expect(PubRec)).packet_id == pid
        await c.send(PubRel(packet_id=pid))
        assert (await c.expect(PubComp)).packet_id == pid
        await c.publish("z", b"after", qos=1)  # the same connection goes on
        await c.expect(PubAck)
        assert (await live(watch)).payload == b"after"  # the refused ones never came
        assert timers.refused == 2
        assert (gw.stats.store_errors, gw.stats.dropped) == (2, 2)
        refusals = [r.getMessage() for r in caplog.records if "$delayed" in r.getMessage()]
        assert len(refusals) == 2, refusals
        assert all(text.count("not stored") == 1 and "timerMaxDelaySec" in text for text in refusals), refusals

        # a real 3.1.1 client: acknowledged, so it exits 0 instead of "The connection was lost"
        out = await trio.run_process(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(port), "-V", "mqttv311",
                                      "-q", "1", "-t", f"$delayed/{MAX_DELAY_S + 1}/z", "-m", "x"],
                                     capture_stdout=True, capture_stderr=True, check=False)
        assert (out.returncode, out.stderr) == (0, b"")


async def test_delay_over_the_maximum_5_refused_with_a_reason_code(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="mqgate")
    async with timer_gateway(tmp_path / "s") as (broker, gw, timers, port):
        c, _ = await Client.connect(port, "new")
        await c.publish(f"$delayed/{MAX_DELAY_S + 1}/z", b"never", qos=1)
        ack = await c.expect(PubAck)
        assert ack.reason_code == ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR
        assert "timerMaxDelaySec" in ack.reason_string and ack.reason_string.count("not stored") == 1
        await c.publish("$delayed/\u00b2/z", b"never", qos=1)  # "\u00b2".isdigit(), but no number for int()
        assert (await c.expect(PubAck)).reason_code == ReasonCode.TOPIC_NAME_INVALID
        await c.publish("z", b"after", qos=1)
        assert (await c.expect(PubAck)).reason_code == 0
        assert gw.stats.dropped == 0  # the publisher was told
        refusals = [r.getMessage() for r in caplog.records if "not stored" in r.getMessage()]
        assert len(refusals) == 1 and refusals[0].count("not stored") == 1, refusals


async def test_delay_0_retained_at_once_on_the_real_topic(tmp_path):
    async with timer_gateway(tmp_path / "s") as (broker, gw, timers, port):
        p, _ = await Client.connect(port, "p")
        await p.publish("$delayed/0/r/now", b"now", qos=1, retain=True)
        assert (await p.expect(PubAck)).reason_code == 0
        assert list(gw.retained.stored) == ["r/now"]
        s, _ = await Client.connect(port, "s")
        assert (await retained(s, "r/now")).payload == b"now"


async def test_retained_will_on_a_delayed_topic(tmp_path):
    async with timer_gateway(tmp_path / "s") as (broker, gw, timers, port):
        watch, _ = await Client.connect(port, "watch")
        await watch.subscribe(Subscription(topic_filter="gone/#", qos=1))
        w, _ = await Client.connect(port, "w", will=Will(topic="$delayed/1/gone/w", payload=b"bye", qos=1,
                                                             retain=True))
        await w.close()  # no DISCONNECT: the will is published, parked for 1 s
        m = await live(watch)
        assert (m.topic, m.payload) == ("gone/w", b"bye")
        assert list(gw.retained.stored) == ["gone/w"]


def _paho_wait_for(port: int, topic: str, ready: trio.Event, token) -> tuple[str, bytes, int]:
    """Subscribe with paho (5.0) and return the first message with when it came (wall ms)."""
    import queue

    got: queue.Queue = queue.Queue()
    subscribed = queue.Queue()
    c = paho.Client(client_id="paho-delayed", protocol=paho.MQTTv5,
                    callback_api_version=paho.CallbackAPIVersion.VERSION2)
    c.on_message = lambda c, u, m: got.put((m.topic, m.payload, now_ms()))
    c.on_subscribe = lambda c, u, mid, codes, props: subscribed.put(codes)
    c.connect("127.0.0.1", port)
    c.loop_start()
    try:
        c.subscribe(topic, qos=1)
        subscribed.get(timeout=5)
        trio.from_thread.run_sync(ready.set, trio_token=token)
        return got.get(timeout=15)
    finally:
        c.disconnect()
        c.loop_stop()


async def test_delayed_message_comes_after_its_delay_to_a_real_client(tmp_path):
    # precision 1000 ms, the default: a timer never fires early, and not late by a whole slot either
    async with timer_gateway(tmp_path / "s", precision_ms=1000) as (broker, gw, timers, port):
        result = {}
        ready = trio.Event()
        token = trio.lowlevel.current_trio_token()

        async def wait() -> None:
            result["got"] = await trio.to_thread.run_sync(_paho_wait_for, port, "later/x", ready, token)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await ready.wait()
            start = now_ms()  # wall clock, like the timer service: the delay is counted from later than this
            await trio.run_process(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(port), "-q", "1",
                                    "-t", "$delayed/2/later/x", "-m", "hello"])
        topic, payload, at = result["got"]
        assert (topic, payload) == ("later/x", b"hello")
        assert 2000 <= at - start < 6000, at - start  # 2 s + 1 s precision + 3 s for a slow machine


async def test_expired_while_parked_dropped_and_counted_once(tmp_path):
    async with timer_gateway(tmp_path / "s") as (broker, gw, timers, port):
        subs = []
        for cid in ("s1", "s2"):
            s, _ = await Client.connect(port, cid)
            await s.subscribe(Subscription(topic_filter="t/+", qos=1))
            subs.append(s)
        p, _ = await Client.connect(port, "p")
        # due at 2 s: one with no subscriber; due at 3 s: one with two; each followed by a marker
        # due no earlier, so once the marker is delivered the expired message has fired
        for delay, topic in ((2, "none/t"), (2, "t/mark2"), (3, "t/e"), (3, "t/mark3")):
            expiry = 1 if "mark" not in topic else None
            await p.publish(f"$delayed/{delay}/{topic}", topic.encode(), qos=1, message_expiry_interval=expiry)
            assert (await p.expect(PubAck)).reason_code == 0
        base = gw.stats.expired
        for s in subs:
            assert (await live(s)).topic == "t/mark2"
        assert gw.stats.expired == base + 1  # no subscriber: counted all the same
        for s in subs:
            assert (await live(s)).topic == "t/mark3"  # t/e went to nobody
        assert gw.stats.expired == base + 2  # two subscribers: counted once
        assert timers.fired == 4


async def test_expired_counts_messages_not_deliveries(gateway_factory, client_cls):
    # not delayed: one message two offline sessions drop as expired, and a retained one that expired
    async with gateway_factory() as (broker, gw, port):
        for cid in ("q1", "q2"):
            s, _ = await client_cls.connect(port, cid, clean_start=False, session_expiry_interval=60)
            await s.subscribe(Subscription(topic_filter="x/+", qos=1))
            await s.disconnect()
        p, _ = await client_cls.connect(port, "p")
        await p.publish("x/old", b"stale", qos=1, retain=True, message_expiry_interval=1)
        await p.expect(PubAck)
        await trio.sleep(1.1)  # let the expiry interval pass
        subs = [(await client_cls.connect(port, cid, clean_start=False, session_expiry_interval=60))[0]
                for cid in ("q1", "q2")]
        await p.publish("x/mark", b"mark", qos=1)  # queued after the expired one
        await p.expect(PubAck)
        for s in subs:
            assert (await live(s)).topic == "x/mark"  # the expired one was dropped, not sent
        assert gw.stats.expired == 1
        late, _ = await client_cls.connect(port, "late")
        await no_retained(late, "x/old")
        assert gw.retained.stored == {} and gw.stats.expired == 2  # the retained copy leaves the index
