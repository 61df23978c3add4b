"""``warmMapedFileEnable`` in a broker: the next commit-log segment is made
ahead through trio (`Broker._segment_ahead_loop`, a worker thread of
``trio.to_thread``), never by a thread of the store's own (decision 6)."""

from __future__ import annotations

import threading

import trio

from core.broker import open_broker
from core.store import StoreConfig
from core.store.message import Message

SEG = 64 * 1024


async def _until(pred, what: str) -> None:
    with trio.fail_after(10):
        while not pred():
            await trio.sleep(0.01)


async def test_a_broker_makes_the_next_segment_through_trio(broker_config, tmp_path):
    store_config = StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=SEG,
                               mapped_file_size_consume_queue=20 * 200, max_hash_slot_num=64, max_index_num=512,
                               warm_maped_file_enable=True)
    async with open_broker(broker_config, store_config) as broker:
        ahead = broker.store.commitlog.ahead
        await _until(lambda: ahead.made == 1, "the segment after the first was never made ahead")
        offsets = []
        while not offsets or offsets[-1] < SEG:
            r = await broker.send(Message("T", b"a" * 1000))
            offsets.append(r.physical_offset)
        assert offsets[-1] == SEG  # the roll took the segment made ahead, at its start
        await _until(lambda: ahead.made == 2, "the roll did not have the one after made")
        assert ahead.failed == 0
        assert not [t.name for t in threading.enumerate() if t.name == "mqgate-next-segment"]
