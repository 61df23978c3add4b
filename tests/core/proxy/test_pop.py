"""core.proxy.pop: in-flight offsets, receipt handles, attempts and the committed offset."""

import pytest

from core.proxy.pop import PopTable, ReceiptError


def table_with(offsets, now=0.0, invisible=10.0):
    t = PopTable()
    q = t.queue("G", "T", 1, start=5)
    handles = [t.hand_out(q, off, now, invisible)[1] for off in offsets]
    return t, q, handles


def test_handing_out_moves_next_offset_and_holds_the_committed_offset_at_the_oldest_in_flight():
    t, q, handles = table_with([5, 6, 7])
    assert q.next_offset == 8 and q.committed() == 5
    t.ack("G", "T", handles[1])
    assert q.committed() == 5
    t.ack("G", "T", handles[0])
    assert q.committed() == 7
    t.ack("G", "T", handles[2])
    assert q.committed() == 8 and not q.inflight


def test_a_message_comes_due_after_its_invisible_time_and_is_handed_out_again_with_the_next_attempt():
    t, q, (h,) = table_with([5], now=100.0, invisible=10.0)
    assert q.due(109.9) == [] and q.next_due() == 110.0
    (f,) = q.due(110.0)
    f2, h2 = t.hand_out(q, f.offset, 110.0, 10.0)
    assert f2.attempt == 2 and h2 != h
    with pytest.raises(ReceiptError, match="stale"):
        t.ack("G", "T", h)
    t.ack("G", "T", h2)


def test_changing_the_invisible_time_gives_a_new_handle_and_keeps_the_attempt():
    t, q, (h,) = table_with([5], now=0.0, invisible=10.0)
    h2 = t.change_invisible("G", "T", h, 3.0, 60.0)
    assert q.inflight[5].visible_at == 63.0 and q.inflight[5].attempt == 1
    with pytest.raises(ReceiptError, match="stale"):
        t.change_invisible("G", "T", h, 3.0, 1.0)
    t.ack("G", "T", h2)


@pytest.mark.parametrize("handle", ["", "nonsense", "mqg1_1_5", "mqg1_x_5_1", "mqg2_1_5_1", "mqg1_1_5_1_9"])
def test_a_handle_we_never_issued_is_refused_in_one_line(handle):
    t, _, _ = table_with([5])
    with pytest.raises(ReceiptError) as e:
        t.ack("G", "T", handle)
    assert "\n" not in str(e.value)


def test_a_handle_of_another_group_or_topic_or_an_acked_message_is_refused():
    t, _, (h,) = table_with([5])
    for group, topic in (("H", "T"), ("G", "U")):
        with pytest.raises(ReceiptError, match="not out"):
            t.ack(group, topic, h)
    t.ack("G", "T", h)
    with pytest.raises(ReceiptError, match="not out"):
        t.ack("G", "T", h)


def test_next_due_is_the_earliest_over_the_queues_of_a_group_and_topic():
    t = PopTable()
    a, b = t.queue("G", "T", 0, 0), t.queue("G", "T", 1, 0)
    t.hand_out(a, 0, 0.0, 30.0)
    t.hand_out(b, 0, 0.0, 5.0)
    t.hand_out(t.queue("H", "T", 0, 0), 0, 0.0, 1.0)
    assert t.next_due("G", "T") == 5.0 and t.next_due("G", "U") is None


def test_the_table_saved_and_loaded_keeps_offsets_attempts_handles_and_the_time_left():
    t = PopTable()
    q = t.queue("G", "T", 1, start=5)
    _, h5 = t.hand_out(q, 5, 100.0, 30.0)          # visible again at trio 130
    t.hand_out(q, 6, 100.0, 30.0)
    (f,) = [f for f in q.inflight.values() if f.offset == 6]
    _, h6 = t.hand_out(q, 6, 131.0, 10.0)          # a redelivery: attempt 2
    saved = t.to_json(trio_now=120.0, wall_now_ms=1_000_000)
    loaded = PopTable()
    loaded.load_json(saved, trio_now=7.0, wall_now_ms=1_002_000)  # 2 s of wall time later, a new trio clock
    lq = loaded.queue("G", "T", 1, start=0)
    assert lq.next_offset == 7 and lq.committed() == 5
    assert lq.inflight[5].visible_at == pytest.approx(7.0 + 8.0)   # 10 s were left, 2 s went by
    assert lq.inflight[6].attempt == 2
    loaded.ack("G", "T", h5)                        # handles from before the restart still work
    loaded.ack("G", "T", h6)
    _, h = loaded.hand_out(lq, 7, 7.0, 1.0)
    assert h not in (h5, h6)                        # and new ones never repeat them


@pytest.mark.parametrize("bad", [{}, {"seq": 1}, {"seq": 1, "queues": [{"group": "G"}]},
                                 {"seq": "x", "queues": []}, {"seq": 1, "queues": [None]}])
def test_a_malformed_save_is_refused_in_one_line_and_changes_nothing(bad):
    t, q, _ = table_with([5])
    with pytest.raises(ValueError) as e:
        t.load_json(bad, 0.0, 0)
    assert "\n" not in str(e.value) and t.queue("G", "T", 1, 0) is q
