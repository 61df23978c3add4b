# C declarations for consume_queue.py when Cython compiles it (setup.py KERNELS;
# ARCHITECTURE.md decision 10): `ConsumeQueue` as an extension type, so the
# store's append loop (store.py, compiled) reads and writes a queue's
# positions as C fields. consume_queue.py stays plain Python: the twin.

cdef class ConsumeQueue:
    cdef public object topic, queue_id, directory, file_size, files, _write_file
    cdef public long long max_offset, min_offset, last_phys, room_end, _synced_pos
    # the store's bookkeeping of one `append_many` (`core.store.append_many.plan`): which call
    # last counted this queue, and the units that call needs in it
    cdef public long long batch_mark, batch_need
