"""A publish stored with a degraded status is stored: the publisher gets its ack once.

A SYNC_MASTER with no slave answers SLAVE_NOT_AVAILABLE (and one whose
slave lags, FLUSH_SLAVE_TIMEOUT): RocketMQ's status for "stored on the
master, not on a slave", which its producers do not send again. The gateway
used to read any status but SEND_OK as "not stored": an MQTT 3.1.1 QoS 1
publisher was closed without a PUBACK, sent the message again, and each
resend was stored again; retained messages and the gateway's own meta
records (persistent sessions) were dropped from its image although they
were in the log. Real broker (a lone SYNC_MASTER) on a temp store, real
MQTT clients over TCP.
"""

from __future__ import annotations

from .conftest import Client, running_gateway
from core.broker import BrokerConfig
from core.broker.config import BrokerRole
from gateway.mqtt import Publish, PubAck


def _lone_sync_master() -> BrokerConfig:
    return BrokerConfig(default_topic_queue_nums=4, listen_port=0, broker_role=BrokerRole.SYNC_MASTER,
                        slave_timeout=200)


async def test_qos1_publishes_to_a_lone_sync_master_are_acked_once_and_kept(tmp_path):
    async with running_gateway(tmp_path, broker_config=_lone_sync_master()) as (broker, gw, port):
        sub, _ = await Client.connect(port, "sub", version=4, clean_start=False)
        await sub.subscribe("t/#", qos=1)
        for version in (4, 5):
            pub, _ = await Client.connect(port, f"pub{version}", version=version)
            await pub.publish(f"t/{version}", f"v{version}".encode(), qos=1, retain=True)
            ack = await pub.expect(PubAck)
            assert getattr(ack, "reason_code", 0) == 0
            await pub.disconnect()
        got = [await sub.expect(Publish) for _ in range(2)]
        assert sorted((p.topic, p.payload) for p in got) == [("t/4", b"v4"), ("t/5", b"v5")]
        assert gw.stats.store_errors == 0
        assert set(gw.retained.stored) == {"t/4", "t/5"}
        late, _ = await Client.connect(port, "late", version=5)
        await late.subscribe("t/#", qos=1)
        retained = sorted([(await late.expect(Publish)).topic for _ in range(2)])
        assert retained == ["t/4", "t/5"]
        await sub.close()
    # the persistent session's meta records were kept: it is there after a restart
    async with running_gateway(tmp_path, broker_config=_lone_sync_master()) as (broker, gw, port):
        assert "sub" in gw.router.sessions
        assert set(gw.retained.stored) == {"t/4", "t/5"}
