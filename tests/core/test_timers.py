"""Timer messages through the broker: any delay, roll-over, restart, refusal.

The broker runs in-process on trio's autojump clock; the timer service's
wall clock is derived from it, so a 10 s delay takes no real time.
"""

from __future__ import annotations

import dataclasses
import random
import shutil

import pytest
import trio
import trio.testing
from thread_aware_clock import thread_aware_clock

from core.broker import PERM_READ, BrokerConfig, SendStatus, TopicConfig, open_broker
from core.store import StoreConfig
from core.store.message import Message
from core.store.timer_wheel import TimerCheckpoint
from core.timers import TIMER_TOPIC, TimerConfig, TimerMessageService

BASE_MS = 1_800_000_000_000


@pytest.fixture
def autojump_clock():
    """Virtual time that jumps only after 10 ms of real idleness: with a zero
    threshold a wait on a worker thread (fsync) would count as idle and make
    deadlines fire in virtual time while the disk is still working."""
    return thread_aware_clock(QUICK_S)


QUICK_S, PATIENT_S = 0.01, 1.0


def clock_ms() -> int:
    return BASE_MS + int(trio.current_time() * 1000)


def store_config(root) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=4 << 20,
                       mapped_file_size_consume_queue=20 * 4096, max_hash_slot_num=4096, max_index_num=65536)


TEST_TIMERS = TimerConfig(precision_ms=100, slots_total=600, roll_window_slots=100,
                          timerlog_file_size=1 << 20, max_delay_s=3600)


class Arrivals:
    """Records the (trio) time at which each message lands in topic T."""

    def __init__(self, broker):
        self.broker = broker
        self.times: dict[str, int] = {}
        self.count = 0
        broker.add_dispatch_listener(self.on_dispatch)
        self._offsets: dict[int, int] = {}

    def on_dispatch(self, topic, queue_id, next_offset):
        if topic != "T":
            return
        start = self._offsets.get(queue_id, 0)
        got = self.broker.store.get_messages("T", queue_id, start, next_offset - start)
        from core.store.message import decode_message
        for raw in got.messages:
            m = decode_message(raw)
            self.times.setdefault(m.properties["UNIQ_KEY"], clock_ms())
            self.count += 1
        self._offsets[queue_id] = next_offset


async def start(nursery, tmp_path, timers=TEST_TIMERS):
    broker = await nursery.start(_run_broker, tmp_path)
    service = TimerMessageService(broker, timers, now_ms=clock_ms)
    service.install()
    await nursery.start(service.run)
    return broker, service


async def _run_broker(tmp_path, *, task_status):
    async with open_broker(BrokerConfig(default_topic_queue_nums=4), store_config(tmp_path / "store")) as broker:
        await broker.update_topic(TopicConfig("T", 4, 4))
        task_status.started(broker)
        await trio.sleep_forever()


async def test_random_delays_fire_within_precision(autojump_clock, tmp_path):
    rnd = random.Random(5)
    async with trio.open_nursery() as nursery:
        broker, service = await start(nursery, tmp_path)
        arrivals = Arrivals(broker)
        due = {}
        n = 2_000  # ~20 per 100 ms slot over the 10 s window
        for i in range(n):
            delay = rnd.randrange(1, 10_000)
            r = await broker.send(Message("T", b"x%d" % i, properties={"TIMER_DELAY_MS": str(delay)}))
            assert r.ok
            due[r.uniq_key] = clock_ms() + delay
        assert arrivals.count == 0 and service.pending >= 0
        await trio.sleep(11)
        assert arrivals.count == n  # each exactly once
        late = [arrivals.times[k] - t for k, t in due.items()]
        assert min(late) >= 0, "a timer fired early"
        assert max(late) <= 100 + 50
        assert service.fired == n and service.pending == 0
        nursery.cancel_scope.cancel()


async def test_delays_beyond_the_window_roll_over(autojump_clock, tmp_path):
    async with trio.open_nursery() as nursery:
        broker, service = await start(nursery, tmp_path)  # window: 100 slots x 100 ms = 10 s
        arrivals = Arrivals(broker)
        r = await broker.send(Message("T", b"late", properties={"TIMER_DELAY_SEC": "35"}))
        due = clock_ms() + 35_000
        await trio.sleep(34)
        assert arrivals.count == 0 and service.rolled >= 2
        await trio.sleep(2)
        assert arrivals.count == 1 and 0 <= arrivals.times[r.uniq_key] - due <= 150
        nursery.cancel_scope.cancel()


async def test_absolute_and_ons_delivery_times(autojump_clock, tmp_path):
    async with trio.open_nursery() as nursery:
        broker, service = await start(nursery, tmp_path)
        arrivals = Arrivals(broker)
        a = await broker.send(Message("T", b"a", properties={"TIMER_DELIVER_MS": str(clock_ms() + 3000)}))
        b = await broker.send(Message("T", b"b", properties={"__STARTDELIVERTIME": str(clock_ms() + 1000)}))
        c = await broker.send(Message("T", b"c", properties={"TIMER_DELIVER_MS": str(clock_ms() - 5)}))
        assert arrivals.count == 1 and c.uniq_key in arrivals.times  # a past time is delivered at once
        await trio.sleep(1.2)
        assert b.uniq_key in arrivals.times and a.uniq_key not in arrivals.times
        await trio.sleep(2)
        assert a.uniq_key in arrivals.times
        nursery.cancel_scope.cancel()


async def test_delivered_message_keeps_body_tags_and_queue(autojump_clock, tmp_path):
    async with trio.open_nursery() as nursery:
        broker, service = await start(nursery, tmp_path)
        await broker.send(Message("T", b"payload", properties={"TIMER_DELAY_SEC": "1", "TAGS": "TagA", "KEYS": "k1"}),
                          queue_id=3)
        assert broker.max_offset(TIMER_TOPIC, 0) == 1
        await trio.sleep(1.5)
        got = await broker.pull("G", "T", 3, 0, 32, "TagA")
        [m] = got.messages()
        assert m.body == b"payload" and m.tags == "TagA" and m.keys == ["k1"]
        assert "TIMER_DELAY_SEC" not in m.properties and "REAL_TOPIC" not in m.properties
        assert int(m.properties["TIMER_DEQUEUE_MS"]) >= int(m.properties["TIMER_ENQUEUE_MS"])
        nursery.cancel_scope.cancel()


async def test_a_restart_midway_loses_none_and_fires_none_twice(autojump_clock, tmp_path):
    """A clean restart while slots are part-fired (precision 1 s: a slot fires
    over a whole second) fires every timer exactly once, and the pending count
    comes back to zero (it is the checkpoint's counter)."""
    rnd = random.Random(9)
    timers = dataclasses.replace(TEST_TIMERS, precision_ms=1000, slots_total=120, roll_window_slots=60)
    keys = []
    async with trio.open_nursery() as nursery:
        broker, service = await start(nursery, tmp_path, timers)
        for i in range(300):
            r = await broker.send(Message("T", b"%d" % i, properties={"TIMER_DELAY_MS": str(rnd.randrange(100, 8000))}))
            keys.append(r.uniq_key)
        await trio.sleep(3.5)
        fired_before = service.fired
        # the shutdown saves its tables in worker threads under trio-time timeouts:
        # no leap of virtual time while a loaded disk works (see autojump_clock)
        autojump_clock.autojump_threshold = PATIENT_S
        nursery.cancel_scope.cancel()
    assert 0 < fired_before < 300
    saved = TimerCheckpoint.load(tmp_path / "store" / "config" / "timercheck")
    assert saved.timestamp > 0 and BASE_MS < saved.fired_through_ms < BASE_MS + 8000 and saved.fired_through_pos > 0
    async with trio.open_nursery() as nursery:
        broker, service = await start(nursery, tmp_path, timers)
        autojump_clock.autojump_threshold = QUICK_S
        await trio.sleep(8)
        got = []
        for q in range(4):
            for m in (await broker.read_queue("T", q, 0, 1000)).messages():
                got.append(m.properties["UNIQ_KEY"])
        assert sorted(got) == sorted(keys)  # each once
        assert fired_before + service.fired == 300 and service.pending == 0
        assert service.wheel.checkpoint.counter == 0
        nursery.cancel_scope.cancel()


async def test_timers_the_store_refuses_for_now_fire_later(autojump_clock, tmp_path):
    """While the broker takes no writes (brokerPermission without write), due
    timers wait and are tried again; none is lost or fired twice."""
    async with trio.open_nursery() as nursery:
        broker, service = await start(nursery, tmp_path)
        arrivals = Arrivals(broker)
        for i in range(20):
            assert (await broker.send(Message("T", b"%d" % i, properties={"TIMER_DELAY_MS": str(500 + 10 * i)}))).ok
        writable = broker.config
        broker.config = dataclasses.replace(writable, broker_permission=PERM_READ)
        await trio.sleep(3)
        assert arrivals.count == 0 and service.fired == 0 and service.pending == 20
        broker.config = writable
        await trio.sleep(1.2)  # tried again every second
        assert arrivals.count == 20 and service.fired == 20 and service.pending == 0
        nursery.cancel_scope.cancel()


async def test_a_timer_filed_late_into_an_untaken_slot_survives_a_stop_there(autojump_clock, tmp_path):
    """A timer already due when it is filed (the loop ran late, or the clock
    stepped forward) goes to the slot of "now", which may not be taken yet
    although its due time is before the taken ones; a stop right then must
    not count it as fired. The lag and the stop are injected at that point
    by wrapping the real wheel's filing call."""
    timers = dataclasses.replace(TEST_TIMERS, precision_ms=1000, slots_total=120, roll_window_slots=60)
    skew = [0]

    def skewed_ms() -> int:
        return clock_ms() + skew[0]

    async with trio.open_nursery() as nursery:
        broker = await nursery.start(_run_broker, tmp_path)
        service = TimerMessageService(broker, timers, now_ms=skewed_ms)
        service.install()
        async with trio.open_nursery() as inner:
            await inner.start(service.run)
            await trio.sleep(0.3)
            file_units = service.wheel.schedule_many

            def late_then_stop(units, now_ms):
                skew[0] = 800  # filed 0.8 s after it was sent: due 0.1 s ago, its slot is "now"'s
                slots = file_units(units, skewed_ms())
                assert min(slots) > service._taken
                inner.cancel_scope.cancel()  # the stop lands before that slot is taken
                return slots

            service.wheel.schedule_many = late_then_stop
            r = await broker.send(Message("T", b"x", properties={"TIMER_DELAY_MS": "400"}))
        arrivals = Arrivals(broker)
        service = TimerMessageService(broker, timers, now_ms=skewed_ms)
        async with trio.open_nursery() as inner:
            await inner.start(service.run)
            await trio.sleep(3)
            assert list(arrivals.times) == [r.uniq_key] and service.pending == 0
            inner.cancel_scope.cancel()
        nursery.cancel_scope.cancel()


async def test_a_timer_whose_queue_is_gone_is_dropped_after_its_tries_and_holds_no_one_back(autojump_clock, tmp_path):
    """The admin shrinks the topic while a timer for queue 3 is pending: its
    delivery is refused (queue id illegal) and filed again for later, with
    growing pauses, then dropped. The other timers fire on time meanwhile; a
    clean stop while it is being tried fires none of them again, and the
    tries go on after the restart."""
    timers = dataclasses.replace(TEST_TIMERS, precision_ms=1000, checkpoint_interval_s=60)  # 15 min in few wake-ups
    async with trio.open_nursery() as nursery:
        broker, service = await start(nursery, tmp_path, timers)
        arrivals = Arrivals(broker)
        await broker.send(Message("T", b"gone", properties={"TIMER_DELAY_MS": "200"}), 3)
        await broker.update_topic(TopicConfig("T", 2, 2))
        due = {}
        for i in range(50):
            r = await broker.send(Message("T", b"%d" % i, properties={"TIMER_DELAY_MS": str(1000 + 37 * i)}), 0)
            due[r.uniq_key] = clock_ms() + 1000 + 37 * i
        await trio.sleep(5)
        assert sorted(arrivals.times) == sorted(due)
        assert max(arrivals.times[k] - t for k, t in due.items()) <= 50  # taken a precision ahead, fired at its time
        assert service.pending == 1 and service.fired == 50  # the gone one: still being tried
        nursery.cancel_scope.cancel()  # a clean stop meanwhile
    async with trio.open_nursery() as nursery:
        broker, service = await start(nursery, tmp_path, timers)  # (which makes T 4 queues again)
        autojump_clock.autojump_threshold = QUICK_S
        await broker.update_topic(TopicConfig("T", 2, 2))
        assert service.pending == 1
        await trio.sleep(15 * 60)
        assert service.fired == 0 and service.pending == 0 and not service._outstanding  # dropped, none again
        stored = [len((await broker.read_queue("T", q, 0, 1000)).messages()) for q in range(2)]
        assert sum(stored) == 50
        # the shutdown saves its tables in worker threads under trio-time timeouts:
        # no leap of virtual time while a loaded disk works (see autojump_clock)
        autojump_clock.autojump_threshold = PATIENT_S
        nursery.cancel_scope.cancel()


async def test_the_pending_count_is_right_after_a_crash_before_the_first_checkpoint(autojump_clock, tmp_path):
    """The store copied while the broker runs (what a SIGKILL leaves), before
    any timer checkpoint: after the restart every timer fires once and the
    pending count comes back to zero."""
    async with trio.open_nursery() as nursery:
        broker, service = await start(nursery, tmp_path / "a")
        for i in range(10):
            assert (await broker.send(Message("T", b"%d" % i, properties={"TIMER_DELAY_MS": "2000"}))).ok
        await trio.sleep(0.3)
        shutil.copytree(tmp_path / "a", tmp_path / "b")
        # the shutdown saves its tables in worker threads under trio-time timeouts:
        # no leap of virtual time while a loaded disk works (see autojump_clock)
        autojump_clock.autojump_threshold = PATIENT_S
        nursery.cancel_scope.cancel()
    await trio.sleep(5)  # down until after they were due
    async with trio.open_nursery() as nursery:
        broker, service = await start(nursery, tmp_path / "b")
        autojump_clock.autojump_threshold = QUICK_S
        await trio.sleep(5)
        assert service.fired == 10 and service.pending == 0
        nursery.cancel_scope.cancel()


async def test_timers_of_a_slot_that_cannot_be_read_are_counted_out(autojump_clock, tmp_path):
    """The timer log is lost between runs: the slots pointing into it are
    skipped with an error (the timers are replayed only from what the queue
    still holds after the checkpoint), and the pending count does not keep
    them."""
    async with trio.open_nursery() as nursery:
        broker, service = await start(nursery, tmp_path)
        for i in range(5):
            assert (await broker.send(Message("T", b"%d" % i, properties={"TIMER_DELAY_MS": "5000"}))).ok
        await trio.sleep(1)
        # the shutdown saves its tables in worker threads under trio-time timeouts:
        # no leap of virtual time while a loaded disk works (see autojump_clock)
        autojump_clock.autojump_threshold = PATIENT_S
        nursery.cancel_scope.cancel()
    shutil.rmtree(tmp_path / "store" / "timerlog")
    async with trio.open_nursery() as nursery:
        broker, service = await start(nursery, tmp_path)
        autojump_clock.autojump_threshold = QUICK_S
        assert service.pending == 5
        await trio.sleep(10)
        assert service.pending == 0
        nursery.cancel_scope.cancel()


async def test_producers_cannot_send_to_the_timer_topic(autojump_clock, tmp_path):
    """An entry of the timer topic names its own real topic and due time: only
    the broker writes there (a producer would bypass the maximum delay and the
    real topic's permissions)."""
    async with trio.open_nursery() as nursery:
        broker, service = await start(nursery, tmp_path)
        forged = Message(TIMER_TOPIC, b"x", properties={"TIMER_OUT_MS": str(clock_ms() + 30 * 86400_000),
                                                         "REAL_TOPIC": "T", "REAL_QID": "0"})
        r = await broker.send(forged, 0)
        assert r.status is SendStatus.NO_PERMISSION and TIMER_TOPIC in r.remark
        assert broker.max_offset(TIMER_TOPIC, 0) == 0
        nursery.cancel_scope.cancel()


async def test_odd_entries_in_the_timer_queue_do_not_stop_the_service(autojump_clock, tmp_path):
    """Entries the put hook would never make (a due time 30 days ahead: more
    than the timer log's int32 delay field holds; an unreadable due time), as
    an old or foreign log may hold: the far one is parked, the unreadable one
    fires at once, and later timers still fire."""
    async with trio.open_nursery() as nursery:
        broker, service = await start(nursery, tmp_path)
        arrivals = Arrivals(broker)
        for key, due in (("far", str(clock_ms() + 30 * 86400_000)), ("odd", "soon")):
            put = broker.store.append(Message(TIMER_TOPIC, b"x", properties={
                "TIMER_OUT_MS": due, "REAL_TOPIC": "T", "REAL_QID": "0", "UNIQ_KEY": key}))
            assert put.status.name == "PUT_OK"
        r = await broker.send(Message("T", b"y", properties={"TIMER_DELAY_MS": "2000"}))
        await trio.sleep(3)
        assert set(arrivals.times) == {"odd", r.uniq_key}
        await trio.sleep(10)
        assert service.rolled >= 1 and "far" not in arrivals.times  # parked a window (10 s) ahead, again and again
        nursery.cancel_scope.cancel()


async def test_delay_level_wins_over_timer_properties(autojump_clock, tmp_path):
    async with trio.open_nursery() as nursery:
        broker, service = await start(nursery, tmp_path)
        msg = Message("T", b"x", properties={"DELAY": "3", "TIMER_DELAY_SEC": "1"})
        assert service.put_hook(msg) is None
        assert "TIMER_DELAY_SEC" not in msg.properties and msg.topic == "T"
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("props, words", [
    ({"TIMER_DELAY_SEC": "7200"}, "timerMaxDelaySec"),
    ({"TIMER_DELAY_MS": "soon"}, "not an integer"),
])
async def test_refusals_say_why(autojump_clock, tmp_path, props, words):
    async with trio.open_nursery() as nursery:
        broker, service = await start(nursery, tmp_path)
        r = await broker.send(Message("T", b"x", properties=dict(props)))
        assert r.status is SendStatus.MESSAGE_ILLEGAL and words in r.remark
        assert broker.max_offset("T", 0) + broker.max_offset(TIMER_TOPIC, 0) == 0
        nursery.cancel_scope.cancel()


async def test_fired_timer_log_files_are_deleted_and_the_rest_still_fire(autojump_clock, tmp_path):
    """Timer log files whose timers have all fired go at a checkpoint (a wheel
    lap after their last unit: 60 s here); a restart afterwards still fires
    every pending timer, from the files that are left."""
    import os

    timers = dataclasses.replace(TEST_TIMERS, timerlog_file_size=52 * 20 + 16)  # twenty units a file
    logdir = tmp_path / "store" / "timerlog"
    keys = set()
    async with trio.open_nursery() as nursery:
        broker, service = await start(nursery, tmp_path, timers)
        for wave in range(6):  # 30 timers every 20 s: 180 units, 9 files
            for i in range(30):
                r = await broker.send(Message("T", b"w%d-%d" % (wave, i), properties={"TIMER_DELAY_MS": str(500 + 100 * i)}))
                keys.add(r.uniq_key)
            await trio.sleep(20)
        names = sorted(os.listdir(logdir))
        # waves 0-2 (units 0-89) were written more than a lap (60.1 s) before the fired-up-to time
        assert names[0] == f"{4 * (52 * 20 + 16):020d}", names
        for i in range(30):  # pending across the restart
            r = await broker.send(Message("T", b"last-%d" % i, properties={"TIMER_DELAY_MS": str(1000 + 100 * i)}))
            keys.add(r.uniq_key)
        # the shutdown saves its tables in worker threads under trio-time timeouts:
        # no leap of virtual time while a loaded disk works (see autojump_clock)
        autojump_clock.autojump_threshold = PATIENT_S
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:
        broker, service = await start(nursery, tmp_path, timers)
        autojump_clock.autojump_threshold = QUICK_S
        await trio.sleep(6)
        got = set()
        for q in range(4):
            for m in (await broker.read_queue("T", q, 0, 10_000)).messages():
                got.add(m.properties["UNIQ_KEY"])
        assert got == keys
        nursery.cancel_scope.cancel()


async def test_an_idle_wheel_saves_its_progress_once_a_minute_not_every_interval(autojump_clock, tmp_path):
    """With no timer filed, pending or fired since the last save, only the
    clock moves: the checkpoint (a 4 KiB page written, fsynced and renamed
    into place, and a sync of the wheel) is saved every ``IDLE_SAVE_S``
    rather than every interval. Filing a timer and firing it each save at
    the next interval, as before."""
    from core.timers import IDLE_SAVE_S

    async with trio.open_nursery() as nursery:
        # 1 s slots: the timer loop wakes once a virtual second, each wake a few real ms
        broker, service = await start(nursery, tmp_path, dataclasses.replace(TEST_TIMERS, precision_ms=1000))
        path = service.wheel.checkpoint.path
        arrivals = Arrivals(broker)
        await trio.sleep(3)  # the first interval saves: nothing was saved in this run yet

        def saved():
            return path.stat().st_ino, path.stat().st_mtime_ns  # a save renames a new file into place

        quiet = saved()
        await trio.sleep(30)
        assert saved() == quiet, "an idle wheel saved its checkpoint within a minute"
        r = await broker.send(Message("T", b"t", properties={"TIMER_DELAY_MS": "2000"}))
        await trio.sleep(1.2)
        filed = saved()
        assert filed != quiet and service.pending == 1  # filed: saved at the next interval
        assert TimerCheckpoint.load(path).counter == 1
        while arrivals.count == 0:
            await trio.sleep(0.05)
        assert r.uniq_key in arrivals.times and service.pending == 0
        await trio.sleep(1.2)
        assert TimerCheckpoint.load(path).counter == 0  # fired: saved at the next interval, not a minute later
        fired = saved()
        await trio.sleep(30)
        assert saved() == fired
        await trio.sleep(IDLE_SAVE_S)
        assert saved() != fired  # idle, but a minute has passed
        nursery.cancel_scope.cancel()


async def test_a_timer_filed_and_fired_between_two_saves_is_saved(autojump_clock, tmp_path):
    """An idle wheel before and after, but the timer queue moved: the next
    interval saves (else a crash would file the timer again and fire it twice)."""
    async with trio.open_nursery() as nursery:
        t0 = trio.current_time()
        broker, service = await start(nursery, tmp_path)
        path = service.wheel.checkpoint.path
        arrivals = Arrivals(broker)
        await trio.sleep_until(t0 + 3.3)  # saves come about t0 + 1, 2, 3 s...: this is between two
        assert TimerCheckpoint.load(path).last_timer_queue_offset == 0
        await broker.send(Message("T", b"t", properties={"TIMER_DELAY_MS": "50"}))
        while arrivals.count == 0:
            await trio.sleep(0.01)
        assert trio.current_time() < t0 + 3.9, "fired after the next save: the test needs a shorter delay"
        await trio.sleep(1.2)
        cp = TimerCheckpoint.load(path)
        assert cp.last_timer_queue_offset == 1 and cp.counter == 0
        nursery.cancel_scope.cancel()


async def test_a_timer_queue_whose_entries_retention_deleted_is_passed_over(autojump_clock, tmp_path):
    """Timer entries whose commit log segment was deleted before the service
    filed them (a broker down longer than fileReservedTime): the timer queue
    moves past them, filing none, and later timers still fire."""
    async with trio.open_nursery() as nursery:
        broker = await nursery.start(_run_broker, tmp_path)
        store = broker.store
        for i in range(3):
            put = store.append(Message(TIMER_TOPIC, b"x", properties={
                "TIMER_OUT_MS": str(clock_ms() + 60_000), "REAL_TOPIC": "T", "REAL_QID": "0", "UNIQ_KEY": f"gone{i}"}))
            assert put.status.name == "PUT_OK"
        while len(store.commitlog.segments) < 2:  # the timer entries' segment is no longer the one written
            assert store.append(Message("F", b"f" * 100_000)).status.name == "PUT_OK"
        assert store.delete_expired(now_ms=clock_ms() + 10 * 86400_000)  # far past fileReservedTime
        service = TimerMessageService(broker, TEST_TIMERS, now_ms=clock_ms)
        service.install()
        await nursery.start(service.run)
        arrivals = Arrivals(broker)
        r = await broker.send(Message("T", b"y", properties={"TIMER_DELAY_MS": "1000"}))
        await trio.sleep(2)
        assert list(arrivals.times) == [r.uniq_key] and service.filed_through == 4
        nursery.cancel_scope.cancel()


async def test_a_checkpoint_the_disk_refuses_is_logged_and_tried_again(autojump_clock, tmp_path, caplog):
    """With a timer pending the wheel saves every interval; a disk that
    refuses the checkpoint's page is logged and the service goes on (the
    timer still fires once the disk takes writes again)."""
    import logging

    from faults import max_file_size

    async with trio.open_nursery() as nursery:
        broker, service = await start(nursery, tmp_path)
        arrivals = Arrivals(broker)
        r = await broker.send(Message("T", b"t", properties={"TIMER_DELAY_MS": "6000"}))
        await trio.sleep(1.2)
        assert service.pending == 1
        with caplog.at_level(logging.ERROR, logger="core.timers"):
            with max_file_size(1024):  # the checkpoint writes a 4 KiB page
                await trio.sleep(2.2)
            assert "timer checkpoint not saved, will retry" in caplog.text
        await trio.sleep(4)
        assert list(arrivals.times) == [r.uniq_key] and service.pending == 0
        assert TimerCheckpoint.load(service.wheel.checkpoint.path).counter == 0  # saved again since
        nursery.cancel_scope.cancel()
