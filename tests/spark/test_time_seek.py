"""startingTimestamp / endingTimestamp: row filters that also seek (store times never decrease along the log)."""

import time

from core.store.message import Message


def test_time_bounds_seek_and_keep_the_same_rows(spark, make_store, tmp_path):
    store = make_store(tmp_path / "data", 8192)
    groups = []
    for _g in range(3):
        groups.append([store.append(Message(topic="devices", body=b"%d" % i)).physical_offset for i in range(80)])
        time.sleep(0.005)  # the next group is stored at a later millisecond

    def read(**options):
        return (spark.read.format("commitlog").option("maxBytesPerPartition", "1k").option("minPartitions", "1")
                .options(**options).load(str(tmp_path / "data")))

    ms = {r.commitlog_offset: round(r.store_ts.timestamp() * 1000) for r in read().collect()}
    t1, t2 = ms[groups[1][0]], ms[groups[2][0]]
    assert t1 > ms[groups[0][-1]] and t2 > ms[groups[1][-1]]
    middle = read(startingTimestamp=str(t1), endingTimestamp=str(t2))
    assert sorted(r.commitlog_offset for r in middle.collect()) == groups[1]
    # only the middle group's ranges are planned (plus the tail partition), not the whole log
    assert middle.rdd.getNumPartitions() <= read().rdd.getNumPartitions() // 3 + 2
    assert sorted(r.commitlog_offset for r in read(startingTimestamp=str(t2)).collect()) == groups[2]
    assert read(endingTimestamp=str(t1)).count() == 80
