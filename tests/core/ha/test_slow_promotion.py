"""A slave that etcd elects keeps the lead while its parts stop slowly.

The process loop (``gateway.broker_node``) answers a role change, stops the
slave's parts (the store's shutdown fsyncs the log, the queues and the
index: on a loaded disk, longer than the watch's half second), and only
then takes the master role. The
controller's watch goes on meanwhile, every half second. It used to read
"etcd names this broker leader but it is a slave" and give the lead up; the
node then came up as master with no leader key, fenced itself ("the leader
key is gone") a moment after its MQTT listener opened, and was elected
again, round after round while stops stayed slow: a device resuming its
session there could get nothing (the rare failure of
test_mqtt_failover.test_a_device_resumes_its_session_on_the_promoted_node).

A slave told to follow a new master asked for that change again at every
round while its parts were stopping: one restart more of a slave per slow
stop.

Here the test is the process loop, in one process with a real etcd and a
real broker: it takes the role change and holds it as a slow stop would,
then applies it and watches that the controller asks for nothing more
(and, elected, keeps the lead)."""

from __future__ import annotations

import json

import trio

from core.broker import BrokerConfig, BrokerRole, open_broker
from core.ha import Controller, HANode
from core.ha.etcd import EtcdClient
from core.store import StoreConfig

SLOW_STOP_S = 1.5  # three rounds of the controller's watch (PUBLISH_S = 0.5 s)
QUIET_S = 2.0  # rounds after the change in which no other change may be asked for


def slave_configs(etcd, tmp_path) -> tuple[BrokerConfig, StoreConfig]:
    return (BrokerConfig(listen_port=0, broker_role=BrokerRole.SLAVE, broker_id=1, etcd_endpoints=etcd.endpoint,
                         ha_lease_ttl_ms=3000),
            StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=1 << 20))


async def test_an_elected_slave_keeps_the_lead_while_its_parts_stop_slowly(etcd, tmp_path):
    config, store_config = slave_configs(etcd, tmp_path)
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


async def test_a_slave_asks_once_to_follow_a_new_master_while_its_parts_stop_slowly(etcd, tmp_path):
    config, store_config = slave_configs(etcd, tmp_path)
    node = HANode(config, store_config.store_path_root_dir)
    controller = node.controller = Controller(node, config)
    masters = [{"id": 0, "addr": f"127.0.0.1:{p}", "haAddr": f"127.0.0.1:{p + 1}", "epoch": e}
               for e, p in ((1, 1), (2, 3))]  # addresses only: no replication link is opened here
    async with EtcdClient([etcd.endpoint]) as client, open_broker(config, store_config) as broker, \
            trio.open_nursery() as nursery:
        await client.put(controller.k_leader, json.dumps(masters[0]))  # no lease: it stays
        node.broker = broker
        await nursery.start(controller.run)  # follows masters[0] from the start, no change asked
        await client.put(controller.k_leader, json.dumps(masters[1]))  # a failover elsewhere
        with trio.fail_after(15):
            change = await node.wait_change()
        assert (change.role, change.master_addr) == (BrokerRole.SLAVE, masters[1]["addr"])
        assert node.next_change == change
        await trio.sleep(SLOW_STOP_S)  # the slave's parts stopping, slowly
        node.stopped()
        node.apply(change)
        node.broker = broker
        assert node.next_change is None
        with trio.move_on_after(QUIET_S):
            later = await node.wait_change()
            raise AssertionError(f"the slave was asked to change again: {later}")
        nursery.cancel_scope.cancel()
