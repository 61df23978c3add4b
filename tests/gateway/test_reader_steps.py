"""A plain-TCP reader reads right after its wake-up (gateway/connection.py,
issue 13): the wait in the gateway's epoll is the read's checkpoint, so the
bytes are taken with one ``os.read`` and no second trio step is spent in
``receive_some``.

A QoS 0 PUBLISH sent alone, to an idle server, costs its connection one
task step: its socket is the only one of its poll in the gateway's epoll, so
`publishing.publish_batch` routes it without the ordering checkpoint, and
the local ``send_many`` returns without one (it need not wait). The
delivery is written in that step. It was three steps (the wake-up and read
up to that checkpoint, the store, the rest of the read), and four through
``receive_some``.
"""

from __future__ import annotations

import trio
import trio.testing

from gateway.mqtt import Publish


class _ConnectionSteps(trio.abc.Instrument):
    """How many task steps the server's connection tasks took."""

    def __init__(self) -> None:
        self.steps = 0

    def after_task_step(self, task) -> None:
        if task.name.endswith("._connection"):
            self.steps += 1


async def test_a_lone_publish_costs_its_reader_one_step(gateway_factory, client_cls):
    n = 50
    async with gateway_factory({"sysInterval": 0}) as (broker, gw, port):
        sub, _ = await client_cls.connect(port, "sub", version=4)
        await sub.subscribe("steps/t", qos=0)
        pub, _ = await client_cls.connect(port, "pub", version=4)
        await pub.send(Publish(topic="steps/t", payload=b"warm"))
        assert (await sub.expect(Publish)).payload == b"warm"
        await trio.testing.wait_all_tasks_blocked()  # the reader has parked again

        counted = _ConnectionSteps()
        trio.lowlevel.add_instrument(counted)
        try:
            for i in range(n):  # one at a time: each is a read of its own
                await pub.send(Publish(topic="steps/t", payload=b"%03d" % i))
                assert (await sub.expect(Publish)).payload == b"%03d" % i
                # the reader's last step (after the delivery is written) ends before it parks
                await trio.testing.wait_all_tasks_blocked()
        finally:
            trio.lowlevel.remove_instrument(counted)
        assert counted.steps == n, counted.steps
        for c in (sub, pub):
            await c.close()
