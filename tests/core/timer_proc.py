"""A broker with its timer service in a process of its own, for the SIGKILL test.

    python timer_proc.py DATA_DIR OUT_DIR send COUNT   # send COUNT timers (keys to OUT_DIR/sent), keep firing
    python timer_proc.py DATA_DIR OUT_DIR drain        # fire what is pending, write OUT_DIR/delivered, exit

``sent`` lists the UNIQ_KEY of every timer the broker acknowledged, a batch
of 100 every 50 ms or so (the test kills the process while it sends and
the first timers fire). ``delivered`` lists the UNIQ_KEY of every message in
topic T, one line per stored message (duplicates included); ``pending`` the
timer service's count of timers filed and not fired, at the end.
"""

from __future__ import annotations

import os
import random
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import trio  # noqa: E402

from core.broker import BrokerConfig, TopicConfig, open_broker  # noqa: E402
from core.store import StoreConfig  # noqa: E402
from core.store.message import TIMER_TOPIC, Message  # noqa: E402
from core.timers import TimerConfig, TimerMessageService  # noqa: E402

TIMERS = TimerConfig(precision_ms=100, checkpoint_interval_s=0.2)
DELAY_MS = (300, 4000)


def write(path: str, lines: list[str]) -> None:
    with open(path + ".tmp", "w") as f:
        f.write("".join(line + "\n" for line in lines))
    os.rename(path + ".tmp", path)


async def main(data_dir: str, out_dir: str, mode: str, count: int = 0) -> None:
    store = StoreConfig(store_path_root_dir=data_dir, mapped_file_size_commit_log=16 << 20,
                        mapped_file_size_consume_queue=20 * 4096)
    async with open_broker(BrokerConfig(default_topic_queue_nums=4), store) as broker:
        await broker.update_topic(TopicConfig("T", 4, 4))
        service = TimerMessageService(broker, TIMERS)
        service.install()
        async with trio.open_nursery() as nursery:
            await nursery.start(service.run)
            if mode == "send":
                rnd = random.Random(7)
                with open(os.path.join(out_dir, "sent"), "w") as sent:
                    for start in range(0, count, 100):
                        batch = [(Message("T", b"%d" % i, properties={"TIMER_DELAY_MS": str(rnd.randrange(*DELAY_MS))}),
                                  None) for i in range(start, min(count, start + 100))]
                        keys = []
                        for r in await broker.send_many(batch):
                            assert r.ok, r
                            keys.append(r.uniq_key)
                        sent.write("".join(k + "\n" for k in keys))
                        sent.flush()
                        await trio.sleep(0.05)  # sends go on while the first timers fire
                await trio.sleep_forever()  # firing, until killed
            end = broker.max_offset(TIMER_TOPIC, 0)  # every timer the killed run stored
            with trio.fail_after(120):  # replayed from the checkpoint: filed to the queue's end, then all fired
                while service.filed_through < end or service.pending or not service.wheel.checkpoint.last_read_time_ms:
                    await trio.sleep(0.1)
            got = []
            for q in range(4):
                got += [m.properties["UNIQ_KEY"] for m in (await broker.read_queue("T", q, 0, 100_000)).messages()]
            write(os.path.join(out_dir, "delivered"), got)
            write(os.path.join(out_dir, "pending"), [str(service.wheel.checkpoint.counter)])  # filed, not fired
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], *(int(a) for a in sys.argv[4:]))
