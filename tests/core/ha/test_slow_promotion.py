"""A slave that etcd elects keeps the lead while its parts stop slowly.

The process loop (``gateway.broker_node``) answers a role change, stops the
slave's parts (the store's shutdown fsyncs the log, the queues and the
index: seconds on a loaded disk), and only then takes the master role. The
controller's watch goes on meanwhile, every half second. It used to read
"etcd names this broker leader but it is a slave" and give the lead up; the
node then came up as master with no leader key, fenced itself ("the leader
key is gone") a moment after its MQTT listener opened, and was elected
again, round after round while stops stayed slow: a device resuming its
session there could get nothing (the rare failure of
test_mqtt_failover.test_a_device_resumes_its_session_on_the_promoted_node).

Here the test is the process loop, in one process with a real etcd and a
real broker: it takes the role change and holds it as a slow stop would,
then applies it and watches the controller keep the lead."""

from __future__ import annotations

import trio

from core.broker import BrokerConfig, BrokerRole, open_broker
from core.ha import Controller, HANode
from core.store import StoreConfig

SLOW_STOP_S = 1.5  # three rounds of the controller's watch (PUBLISH_S = 0.5 s)
QUIET_S = 2.0  # rounds after the change in which no other change may be asked for


async def test_an_elected_slave_keeps_the_lead_while_its_parts_stop_slowly(etcd, tmp_path):
    config = BrokerConfig(listen_port=0, broker_role=BrokerRole.SLAVE, broker_id=1, etcd_endpoints=etcd.endpoint,
                          ha_lease_ttl_ms=3000)
    store_config = StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=1 << 20)
    node = HANode(config, store_config.store_path_root_dir)
    controller = node.controller = Controller(node, config)
    async with open_broker(config, store_config) as broker, trio.open_nursery() as nursery:
        node.broker = broker  # the slave's parts are running
        await nursery.start(controller.run)
        with trio.fail_after(15):
            change = await node.wait_change()  # no leader: this broker is elected
        assert change.role is BrokerRole.SYNC_MASTER and change.reason == "elected through etcd"
        assert node.becoming_master and not node.is_master
        await trio.sleep(SLOW_STOP_S)  # the slave's parts stopping, slowly
        node.stopped()
        node.apply(change)
        node.broker = broker  # the master's parts (the same store is all the controller reads)
        assert node.is_master and not node.becoming_master
        with trio.move_on_after(QUIET_S):
            later = await node.wait_change()
            raise AssertionError(f"the new master was asked to change again: {later}")
        assert controller.leader is not None and controller.leader["id"] == config.broker_id, controller.leader
        assert not controller.fencing
        nursery.cancel_scope.cancel()
