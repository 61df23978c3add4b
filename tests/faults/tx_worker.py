"""Transactions of the kill rounds: the unmodified 5.x ``rocketmq-python-client`` over gRPC.

``python tx_worker.py ENDPOINT TOPIC OUT STOP EXIT``

Sends half messages (keys ``x<seq>``) one after another across broker kills
until the file STOP exists; the application's decision for each is
`decision(seq)`: two of three are committed at once, the third is left open
and the broker's check answers COMMIT or ROLLBACK by parity.  The checker
keeps answering until EXIT exists, so transactions left open by a kill are
resolved after the last restart.  OUT gets one JSON line per acknowledged half
(``half``), per acknowledged commit (``commit``) and per check (``check``).

Its own process: the client's generated protobuf classes and grpc threads
stay out of the campaign, and the C++ client's empty ``rocketmq/__init__``
does not matter there (the Makefile installs this client last).
"""

from __future__ import annotations

import json
import os
import sys
import time

from rocketmq.grpc_protocol import TransactionResolution
from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.model import Message
from rocketmq.v5.producer import Producer, TransactionChecker


def decision(seq: int) -> str:
    """What the application wants for transaction ``seq``: 'commit' or 'rollback'."""
    return "commit" if seq % 3 or seq % 2 == 0 else "rollback"


class ParityChecker(TransactionChecker):
    def __init__(self, out) -> None:
        self.out = out

    def check(self, message) -> TransactionResolution:
        seq = int(message.body.decode())
        self.out.write(json.dumps({"kind": "check", "seq": seq, "t": time.time()}) + "\n")
        return TransactionResolution.COMMIT if decision(seq) == "commit" else TransactionResolution.ROLLBACK


def main(endpoint: str, topic: str, out_path: str, stop_path: str, exit_path: str) -> int:
    out = open(out_path, "a", buffering=1)
    producer = Producer(ClientConfiguration(endpoint, Credentials(), request_timeout=3), (topic,), ParityChecker(out))
    producer.startup()
    seq = 0
    try:
        while not os.path.exists(stop_path):
            seq += 1
            m = Message()
            m.topic = topic
            m.body = str(seq).encode()
            m.keys = "x%d" % seq
            try:
                tx = producer.begin_transaction()
                producer.send(m, tx)
            except Exception:  # the broker is down or restarting
                time.sleep(0.1)
                continue
            out.write(json.dumps({"kind": "half", "seq": seq, "t": time.time()}) + "\n")
            if seq % 3:
                try:
                    tx.commit()
                    out.write(json.dumps({"kind": "commit", "seq": seq, "t": time.time()}) + "\n")
                except Exception:
                    pass  # left to the broker's check, which answers the same decision
            time.sleep(0.02)
        while not os.path.exists(exit_path):
            time.sleep(0.1)  # keep answering checks
    finally:
        producer.shutdown()
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
