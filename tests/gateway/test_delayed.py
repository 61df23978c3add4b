"""``$delayed/<seconds>/<topic>``: the gateway on a broker with its timer
service, wired as ``gateway.serve`` does (the timer put hook first), over real
sockets and real clients.

What is checked: that a delay the broker refuses is answered without losing
the connection (3.1.1 and 5.0).
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

import trio

from core.broker import BrokerConfig, open_broker
from core.timers import TimerConfig, TimerMessageService
from gateway.app import MQTTGateway
from gateway.listeners import ListenerSpec
from gateway.mqtt import PubAck, PubComp, PubRec, PubRel, Publish, ReasonCode, Subscription

from .conftest import Client, small_store_config

MAX_DELAY_S = 60  # timerMaxDelaySec of these tests


@asynccontextmanager
async def timer_gateway(root, *, precision_ms: int = 100):
    """(broker, gateway, timer service, MQTT port), the timer service attached as ``gateway.serve`` does."""
    cfg = BrokerConfig(default_topic_queue_nums=4, listen_port=0)
    async with open_broker(cfg, small_store_config(root)) as broker:
        timers = TimerMessageService(broker, TimerConfig(precision_ms=precision_ms, slots_total=3600,
                                                         timerlog_file_size=1 << 20, max_delay_s=MAX_DELAY_S))
        broker.add_put_hook(timers.put_hook)
        async with trio.open_nursery() as nursery:
            await nursery.start(timers.run)
            broker.timers = timers
            gw = MQTTGateway(broker, {"sysInterval": 0})
            ports = await nursery.start(gw.run, [ListenerSpec(transport="tcp", ephemeral=True)])
            try:
                yield broker, gw, timers, ports["tcp"]
            finally:
                nursery.cancel_scope.cancel()


async def live(client: Client) -> Publish:
    m = await client.expect(Publish, timeout=10)
    if m.qos:
        await client.send(PubAck(packet_id=m.packet_id))
    return m


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
