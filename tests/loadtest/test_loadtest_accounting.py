"""Accounting on known data: lost, duplicated, out of order, percentiles."""

import pytest

from loadtest import accounting as acc


def _log(group, **arrivals):
    log = acc.SubscriberLog(group)
    for pub, seqs in arrivals.items():
        for seq in seqs:
            log.record(acc.stamp(int(pub[1:]), seq, 1_000, 32), 1_000 + 1_000_000)
    return log


def test_stamp_round_trip_and_foreign_payloads():
    payload = acc.stamp(7, 42, 123456789, 100)
    assert len(payload) == 100
    assert acc.read_stamp(payload) == (7, 42, 123456789)
    log = acc.SubscriberLog("s")
    assert log.record(b"not ours at all, long enough", 0) is None
    assert log.record(b"short", 0) is None
    assert log.foreign == 2 and log.arrivals == {}


def test_exact_delivery():
    [row] = acc.tally({0: 5}, [_log("s", p0=[0, 1, 2, 3, 4])])
    assert (row.delivered, row.distinct, row.lost, row.duplicated, row.out_of_order) == \
        (5, 5, 0, 0, 0)


def test_duplicates_are_detected():
    [row] = acc.tally({0: 4}, [_log("s", p0=[0, 1, 1, 2, 3, 3, 3])])
    assert row.delivered == 7
    assert row.duplicated == 3
    assert row.lost == 0
    assert row.out_of_order == 0  # a duplicate is not also out of order


def test_lost_and_out_of_order():
    [row] = acc.tally({0: 6}, [_log("s", p0=[0, 2, 1, 5])])
    assert row.lost == 2          # 3 and 4 never came
    assert row.out_of_order == 1  # 1 after 2
    assert acc.out_of_order([3, 2, 1, 0]) == 3
    assert acc.out_of_order([0, 1, 2, 3]) == 0


def test_sequence_numbers_never_sent_are_not_deliveries():
    [row] = acc.tally({0: 2}, [_log("s", p0=[0, 1, 9])])
    assert row.distinct == 2 and row.lost == 0


def test_per_publisher_and_per_group():
    logs = [_log("a", p0=[0, 1], p1=[0]), _log("b", p0=[0, 1], p1=[0, 1])]
    rows = {r.publisher: r for r in acc.tally({0: 2, 1: 2}, logs)}
    assert rows[0].lost == 0 and rows[0].delivered == 4
    assert rows[1].lost == 1  # group a missed p1 #1
    # a publisher expected only by group b
    rows = {r.publisher: r for r in acc.tally({0: 2, 1: 2}, logs, {0: ["a"], 1: ["b"]})}
    assert rows[0].delivered == 2 and rows[1].lost == 0


def test_shared_group_members_together_get_each_message_once():
    logs = [_log("g", p0=[0, 2, 4]), _log("g", p0=[1, 3])]
    [row] = acc.tally({0: 5}, logs)
    assert (row.lost, row.duplicated, row.out_of_order) == (0, 0, 0)
    [row] = acc.tally({0: 5}, logs + [_log("g", p0=[3])])
    assert row.duplicated == 1


def test_percentiles_on_known_data():
    data = list(range(1, 101))  # 1..100
    assert acc.percentile(data, 50) == 50
    assert acc.percentile(data, 90) == 90
    assert acc.percentile(data, 99) == 99
    assert acc.percentile(data, 100) == 100
    assert acc.percentile([5], 99) == 5
    assert acc.percentile([], 50) is None
    assert acc.percentile([1, 2, 3, 4], 50) == 2   # nearest rank, not interpolated
    summary = acc.latency_summary([i * 1_000_000 for i in range(100, 0, -1)])  # ms 1..100
    assert summary["count"] == 100
    assert (summary["p50"], summary["p90"], summary["p99"], summary["max"]) == \
        pytest.approx((50.0, 90.0, 99.0, 100.0))
    assert summary["mean"] == pytest.approx(50.5)
    assert len(summary["cdf"]) == 101 and summary["cdf"][-1] == pytest.approx(100.0)
    assert summary["cdf"] == sorted(summary["cdf"])


def test_series_buckets():
    assert acc.series([0, 5, 10, 25], 0, 1e-8) == [2, 1, 1]
    b = acc.Buckets(100, 1e-8)
    b.add(100, 3)
    b.add(135)
    assert b.counts == [3, 0, 0, 1]
    assert acc.add_series([1, 2], [1, 1, 1]) == [2, 3, 1]
