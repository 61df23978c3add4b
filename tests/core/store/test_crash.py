"""A SYNC_FLUSH writer process killed with SIGKILL loses no acknowledged message."""

import os
import signal
import subprocess
import sys

from core.store import GetMessageStatus, Message, MessageStore, decode_message

from .conftest import small_config

HERE = os.path.dirname(__file__)
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


def test_sigkill_loses_no_acked_message(tmp_path):
    root = tmp_path / "store"
    env = dict(os.environ, PYTHONPATH=REPO)
    child = subprocess.Popen([sys.executable, os.path.join(HERE, "crash_writer.py"), str(root)],
                             stdout=subprocess.PIPE, env=env, cwd=REPO)
    acked = []
    try:
        assert child.stdout.readline() == b"started\n"
        while len(acked) < 1200:
            line = child.stdout.readline()
            assert line, "child died"
            qid, qoff, phys = map(int, line.split())
            acked.append((qid, qoff, phys))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()

    s = MessageStore(small_config(root))
    report = s.start()
    assert report.abnormal_exit
    assert len(os.listdir(root / "commitlog")) > 2  # the log rolled while writing
    per_queue = {}
    for qid, qoff, phys in acked:
        per_queue.setdefault(qid, []).append((qoff, phys))
    for qid, items in per_queue.items():
        # acks of one queue came in queue order, from 0, without gaps
        assert [q for q, _ in items] == list(range(len(items)))
        for qoff, phys in items:
            got = s.get_messages("Crash", qid, qoff, 1)
            assert got.status is GetMessageStatus.FOUND
            m = decode_message(got.messages[0])
            assert (m.queue_offset, m.physical_offset) == (qoff, phys)
            assert m.body.startswith(b"q%d-%06d" % (qid, qoff))
        assert s.max_offset("Crash", qid) >= len(items)
        # everything the log holds past the acks is also whole and in order
        tail = s.get_messages("Crash", qid, len(items), 1000, max_bytes=1 << 30)
        assert [decode_message(m).queue_offset for m in tail.messages] == list(range(len(items), s.max_offset("Crash", qid)))
    # the index answers for old and recent keys alike
    for qid, qoff, phys in acked[::37] + acked[-3:]:
        (hit,) = s.query_by_key("Crash", "q%d-%d" % (qid, qoff)).messages
        assert decode_message(hit).physical_offset == phys
    # and the store goes on
    r = s.append(Message(topic="Crash", body=b"after", queue_id=0))
    assert r.queue_offset == s.max_offset("Crash", 0) - 1
    s.shutdown()
