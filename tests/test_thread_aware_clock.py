"""The test clock of tests/support/thread_aware_clock.py does not jump while
a worker thread works (a plain autojump clock does), and still jumps after."""

import time

import pytest
import trio
from trio.testing import MockClock

from thread_aware_clock import thread_aware_clock


async def _deadline_seen_before_the_thread_ended() -> bool:
    order = []

    async def deadline():
        await trio.sleep(1)  # virtual: a jump away
        order.append("deadline")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(deadline)
        await trio.to_thread.run_sync(time.sleep, 0.2)  # real work, 20 thresholds long
        order.append("thread")
    return order[0] == "deadline"


@pytest.mark.parametrize("make, jumps_early", [(lambda: MockClock(autojump_threshold=0.01), True),
                                               (lambda: thread_aware_clock(0.01), False)])
def test_no_jump_while_a_worker_thread_works(make, jumps_early):
    clock = make()
    assert trio.run(_deadline_seen_before_the_thread_ended, clock=clock) is jumps_early
    assert clock.current_time() >= 1  # the deadline came in the end, by a jump
