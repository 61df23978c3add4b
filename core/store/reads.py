"""The read side of `MessageStore` (a mixin, split out by job): queue reads
for PULL, consume-queue units without the log, offsets, times and lookups by
offset, message id and key. Every read takes the store's lock (short), so
retention never unmaps a file under it; see core/store/store.py for the
rules writes keep.
"""

from __future__ import annotations

from typing import Callable

from .consume_queue import BLANK_UNIT_SIZE
from .errors import GetMessageStatus
from .message import decode_message, parse_offset_msg_id
from .results import GetResult, QueryResult


class StoreReads:
    """Reads of a `MessageStore`; uses its ``_lock``, ``_queues``,
    ``commitlog``, ``config`` and index (``_index``, ``_index_lock``,
    ``_drain_index``)."""

    def get_messages(self, topic: str, queue_id: int, offset: int, max_count: int | None = None,
                     tag_codes: set[int] | frozenset[int] | None = None, max_bytes: int | None = None,
                     entry_filter: Callable[[bytes], bool] | None = None) -> GetResult:
        """Raw entries of (topic, queue_id) from ``offset`` (reference 2.5).
        ``tag_codes``: keep only units whose tags code is in the set (None = all).
        ``entry_filter``: keep only entries (whole, as read from the log) it
        returns True for, after the tag check (RocketMQ ``isMatchedByCommitLog``);
        it runs under the store's lock, so it must be quick and must not raise."""
        if max_count is None:
            max_count = self.config.max_transfer_count_on_message_in_memory
        if max_bytes is None:
            max_bytes = self.config.max_transfer_bytes_on_message_in_memory
        S = GetMessageStatus
        with self._lock:
            cq = self._queues.get((topic, queue_id))
            if cq is None:
                return GetResult(S.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
            lo, hi = cq.min_offset, cq.max_offset
            if hi == 0:
                return GetResult(S.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
            if offset < lo:
                return GetResult(S.OFFSET_TOO_SMALL, lo, lo, hi)
            if offset == hi:
                return GetResult(S.OFFSET_OVERFLOW_ONE, offset, lo, hi)
            if offset > hi:
                return GetResult(S.OFFSET_OVERFLOW_BADLY, lo if lo == 0 else hi, lo, hi)
            units = cq.units(offset, max(16000 // 20, max_count))
            if units is None:
                return GetResult(S.OFFSET_FOUND_NULL, cq.next_file_offset(offset), lo, hi)
            cl = self.commitlog
            log_min = cl.min_offset
            msgs: list[bytes] = []
            qoffs: list[int] = []
            status = S.NO_MATCHED_MESSAGE
            total = 0
            scanned = 0
            for phys, size, tags in units:
                if msgs and (len(msgs) >= max_count or total + size > max_bytes):
                    break
                scanned += 1
                if phys < log_min or size == BLANK_UNIT_SIZE or size <= 0:
                    status = S.MESSAGE_WAS_REMOVING if not msgs else status
                    continue
                if tag_codes is not None and tags not in tag_codes:
                    continue
                data = cl.read(phys, size)
                if data is None:
                    status = S.MESSAGE_WAS_REMOVING if not msgs else status
                    continue
                if entry_filter is not None and not entry_filter(data):
                    continue
                msgs.append(data)
                qoffs.append(offset + scanned - 1)
                total += size
            if msgs:
                status = S.FOUND
            return GetResult(status, offset + scanned, lo, hi, msgs, qoffs)

    def read_units(self, topic: str, queue_id: int, offset: int, max_count: int) -> tuple[list[tuple[int, int, int]], int]:
        """The consume-queue units (commit-log offset, size, tags code) from
        ``offset``, without reading the log, and the offset after them.

        Units whose entry is gone (retention) or that are blank are left out
        but counted, so the returned offset always moves past them."""
        with self._lock:
            cq = self._queues.get((topic, queue_id))
            if cq is None or offset >= cq.max_offset:
                return [], offset
            offset = max(offset, cq.min_offset)
            units = cq.units(offset, min(max_count, cq.max_offset - offset))
            if units is None:
                return [], cq.next_file_offset(offset)
            log_min = self.commitlog.min_offset
            kept = [u for u in units if u[0] >= log_min and 0 < u[1] != BLANK_UNIT_SIZE]
            return kept, offset + len(units)

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self._queues.get((topic, queue_id))
        return cq.min_offset if cq is not None else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The next queue offset to assign (0 for an unknown queue)."""
        cq = self._queues.get((topic, queue_id))
        return cq.max_offset if cq is not None else 0

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset whose store timestamp is >= ``timestamp_ms``
        (binary search); ``max_offset`` if every message is older, ``min_offset``
        if every message is newer."""
        with self._lock:
            cq = self._queues.get((topic, queue_id))
            if cq is None:
                return 0
            lo, hi = cq.min_offset, cq.max_offset
            cl = self.commitlog
            while lo < hi:
                mid = (lo + hi) // 2
                u = cq.unit(mid)
                if u is None or u[1] == BLANK_UNIT_SIZE or cl.store_ts_at(u[0]) < timestamp_ms:
                    lo = mid + 1
                else:
                    hi = mid
            return lo

    def earliest_store_time(self, topic: str | None = None, queue_id: int = 0) -> int:
        """Store timestamp of the first message still held (of one queue, or of
        the whole log when ``topic`` is None); -1 if there is none."""
        with self._lock:
            cl = self.commitlog
            if topic is None:
                pos = cl.min_offset
                while pos < cl.write_pos:
                    if cl.read_entry(pos) is not None:
                        return cl.store_ts_at(pos)
                    seg = cl.segment_for(pos)
                    pos = seg.end if seg else cl.write_pos
                return -1
            cq = self._queues.get((topic, queue_id))
            if cq is None or cq.max_offset <= cq.min_offset:
                return -1
            u = cq.unit(cq.min_offset)
            return cl.store_ts_at(u[0]) if u else -1

    def store_time(self, topic: str, queue_id: int, offset: int) -> int:
        """Store timestamp of the message at a queue offset; -1 if none."""
        with self._lock:
            cq = self._queues.get((topic, queue_id))
            u = cq.unit(offset) if cq is not None and offset >= cq.min_offset else None
            return self.commitlog.store_ts_at(u[0]) if u and u[1] != BLANK_UNIT_SIZE else -1

    def read_at(self, physical_offset: int) -> bytes | None:
        """The entry stored at a commit-log offset, or None."""
        with self._lock:
            if physical_offset < self.commitlog.min_offset:
                return None
            return self.commitlog.read_entry(physical_offset)

    def read_by_msg_id(self, msg_id: str) -> bytes | None:
        """The entry named by an offset message id (VIEW_MESSAGE_BY_ID)."""
        try:
            _host, phys = parse_offset_msg_id(msg_id)
        except ValueError:
            return None
        return self.read_at(phys)

    def query_by_key(self, topic: str, key: str, max_num: int = 32, begin_ts: int = 0, end_ts: int = 2**63 - 1) -> QueryResult:
        """Entries of ``topic`` whose UNIQ_KEY or one KEYS token is ``key`` and
        whose store time is in [begin_ts, end_ts], newest first, at most max_num."""
        idx = self._index
        if idx is None:
            return QueryResult([], 0, 0)
        self._drain_index()
        with self._index_lock:
            candidates = idx.query(f"{topic}#{key}", max_num * 4 + 16, begin_ts, end_ts)
            last_ts, last_phys = idx.last_ts, idx.end_phys
        out = []
        seen = set()
        for phys in candidates:
            if len(out) >= max_num or phys in seen:
                continue
            seen.add(phys)
            data = self.read_at(phys)
            if data is None:
                continue
            m = decode_message(data)
            if m.topic != topic or not begin_ts <= m.store_timestamp <= end_ts:
                continue
            if key in m.keys or m.properties.get("UNIQ_KEY") == key:
                out.append(data)
        return QueryResult(out, last_ts, last_phys)

    def topics(self) -> list[str]:
        with self._lock:  # appends on another thread add queues
            return sorted({t for t, _q in self._queues})

    def queue_ids(self, topic: str) -> list[int]:
        with self._lock:
            return sorted(q for t, q in self._queues if t == topic)
