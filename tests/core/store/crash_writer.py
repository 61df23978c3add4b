"""Child process for the SIGKILL test: SYNC_FLUSH puts from 4 threads, one
acked line per message on stdout (``qid qoff phys``), a periodic flush()."""

import sys
import threading
import time

from core.store import FlushDiskType, Message, MessageStore, StoreConfig

root = sys.argv[1]
store = MessageStore(StoreConfig(
    store_path_root_dir=root, mapped_file_size_commit_log=64 * 1024,
    mapped_file_size_consume_queue=20 * 200, max_hash_slot_num=64, max_index_num=512,
    flush_disk_type=FlushDiskType.SYNC_FLUSH))
store.start()
out_lock = threading.Lock()


def producer(qid):
    i = 0
    while True:
        body = b"q%d-%06d" % (qid, i) + b"." * 150
        r = store.put(Message(topic="Crash", body=body, queue_id=qid, properties={"KEYS": "q%d-%d" % (qid, i)}))
        if r.status.name != "PUT_OK":
            continue
        with out_lock:
            sys.stdout.write(f"{qid} {r.queue_offset} {r.physical_offset}\n")
            sys.stdout.flush()
        i += 1


def flusher():
    while True:
        time.sleep(0.02)
        store.flush()


sys.stdout.write("started\n")
sys.stdout.flush()
for q in range(4):
    threading.Thread(target=producer, args=(q,), daemon=True).start()
threading.Thread(target=flusher, daemon=True).start()
while True:
    time.sleep(1)
