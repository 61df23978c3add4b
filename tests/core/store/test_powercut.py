"""Power-cut replay of the store (issue 17): recovery from on-disk images of a cut.

``tests/support/powercut.py`` records the durable content of each file at
every real fsync of a live store and, at a cut, makes the image: each file's
last synced content plus any subset of the 4 KiB pages written since, some
of them torn. The real store then recovers from that image: it must start,
serve only entries that were written (byte for byte), keep every
acknowledged one, and name the file and offset of what it cut.

The bounded run here is 40 seeded rounds (SYNC_FLUSH and ASYNC_FLUSH); the
long one is ``python tests/support/powercut.py --rounds N --seed S``.

Regression (found by the campaign): a page lost in the middle of the
unflushed tail, with later pages on disk, made recovery refuse to start
(``CorruptSegmentError``: "a valid entry follows"), 28 rounds in 100. The
checkpoint now records the flushed log offset, and a hole past it is the
torn tail of writes nobody was told were durable; below it, it is still
corruption.
"""

from __future__ import annotations

import os
import shutil

import pytest

from powercut import campaign

from core.store import CorruptSegmentError, Message, MessageStore

from .conftest import small_config


def test_power_cuts_lose_nothing_acknowledged_and_accept_nothing_corrupt(tmp_path):
    work = "/dev/shm" if os.path.isdir("/dev/shm") else str(tmp_path)  # fsync there costs nothing
    figures = campaign(40, seed=1000, workdir=work)
    assert figures.violations == []
    assert figures.rounds == 40
    assert figures.acked > 1000 and figures.recovered >= figures.acked
    assert figures.truncated_entries > 0 and figures.truncations_reported > 0  # cuts really hit unsynced data
    assert figures.pages_lost > 0 and figures.pages_torn > 0


def _crash_image(tmp_path, hole_in_flushed: bool):
    """A store with flushed entries, then unflushed ones; its files copied as
    a crash would leave them, with one 4 KiB page of zeros punched either in
    the unflushed stretch (a page never written back) or in the flushed one."""
    live = tmp_path / "live"
    s = MessageStore(small_config(live))
    s.start()
    for i in range(10):
        s.append(Message(topic="T", body=b"f%d" % i + b"x" * 1500))
    flushed = s.flush()
    ends = [s.append(Message(topic="T", body=b"u%d" % i + b"y" * 1500)).end_offset for i in range(20)]
    image = tmp_path / "image"
    shutil.copytree(live, image)
    s.shutdown()
    hole = (flushed // 2 if hole_in_flushed else (flushed + ends[-1]) // 2) // 4096 * 4096
    seg = image / "commitlog" / f"{0:020d}"
    with open(seg, "r+b") as f:
        f.seek(hole)
        f.write(bytes(4096))
    (image / "abort").touch()
    return image, flushed, hole


def test_a_page_lost_after_the_flushed_offset_is_a_torn_tail(tmp_path):
    image, flushed, hole = _crash_image(tmp_path, hole_in_flushed=False)
    s = MessageStore(small_config(image))
    report = s.start()
    try:
        assert flushed <= report.log_max_offset <= hole
        assert report.truncated_bytes_at == report.log_max_offset
        assert report.truncated_file.endswith(f"{0:020d}")
        assert report.torn_hole is not None and report.torn_hole[1] == report.log_max_offset
        assert "torn tail cut at" in str(report) and "never reached the disk" in str(report)
        assert s.max_offset("T", 0) >= 10  # every flushed entry is served
    finally:
        s.shutdown()


def test_a_page_lost_below_the_flushed_offset_is_corruption(tmp_path):
    image, _flushed, hole = _crash_image(tmp_path, hole_in_flushed=True)
    s = MessageStore(small_config(image))
    with pytest.raises(CorruptSegmentError) as e:
        s.start()
    assert str(image / "commitlog") in str(e.value)
