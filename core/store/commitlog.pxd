# C declarations for commitlog.py when Cython compiles it (setup.py KERNELS;
# ARCHITECTURE.md decision 10): `CommitLog` as an extension type, so the
# store's typed append paths (append_many.py) read and move the log's
# position as C fields. commitlog.py stays plain Python: the twin.

cdef class CommitLog:
    cdef public object directory, warm, ahead, lock, segments, current, _flush_mutex, _waiters
    cdef public long long segment_size, write_pos, last_store_ts, flushed, flushed_store_ts, sync_count
    cdef public bint _flushing
