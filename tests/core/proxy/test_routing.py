"""Routes of other broker groups (`core.proxy.routing`) from a real name server and
broker: a master is in a 5.x route only with the gRPC port it reports."""

from __future__ import annotations

import trio

from cluster import broker_cluster, create_routed_topic
from core.client.api import open_client_api
from core.proxy.routing import ClusterRoutes, RoutedGroup


async def test_another_group_is_routed_with_its_reported_grpc_port_and_left_out_without_one(tmp_path):
    async with trio.open_nursery() as nursery:
        async with broker_cluster(nursery, tmp_path) as c:
            await create_routed_topic(c, "Routed", queues=3)
            own = RoutedGroup("here", 2, True, True, None)
            async with open_client_api() as api:
                # the cluster's broker serves no gRPC (port 0): its queues are left out
                assert await ClusterRoutes(api, [c.namesrv], "here").groups("Routed", own) == [own]
                c.broker.grpc_port = 18081
                routes = ClusterRoutes(api, [c.namesrv], "here")
                name = c.broker.config.broker_name
                theirs = RoutedGroup(name, 3, True, True, ("127.0.0.1", 18081), c.broker_addr)
                assert await routes.groups("Routed", own) == [own, theirs]
                assert await routes.groups("Routed", None) == [theirs]
                assert await routes.other_groups("Routed") == [theirs]
                # the broker's own group is answered from its own table, never twice
                assert await ClusterRoutes(api, [c.namesrv], name).groups("Routed", own) == [own]
                # an unknown topic, and a name server that is not there: this broker alone, at once
                assert await routes.groups("NoSuchTopic", own) == [own]
                with trio.fail_after(3):
                    assert await ClusterRoutes(api, ["127.0.0.1:1"], "here").groups("Routed", None) == []
        nursery.cancel_scope.cancel()
