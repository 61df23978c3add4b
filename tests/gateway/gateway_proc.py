"""A broker + MQTT gateway in a process of its own, for crash tests.

    python gateway_proc.py DATA_DIR PORT_FILE [SYNC_FLUSH|ASYNC_FLUSH]

Binds an OS-chosen port and writes it to PORT_FILE once listening.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import trio  # noqa: E402

from core.broker import BrokerConfig, FlushDiskType, open_broker  # noqa: E402
from core.store import StoreConfig  # noqa: E402
from gateway.app import MQTTGateway  # noqa: E402
from gateway.listeners import ListenerSpec  # noqa: E402


async def main(data_dir: str, port_file: str, flush: str) -> None:
    cfg = BrokerConfig(default_topic_queue_nums=4, listen_port=0, flush_disk_type=FlushDiskType(flush))
    store = StoreConfig(store_path_root_dir=data_dir, mapped_file_size_commit_log=4 << 20,
                        mapped_file_size_consume_queue=20 * 4096, max_hash_slot_num=1024, max_index_num=8192)
    async with open_broker(cfg, store) as broker:
        gw = MQTTGateway(broker, {"sysInterval": 0})
        async with trio.open_nursery() as nursery:
            ports = await nursery.start(gw.run, [ListenerSpec(transport="tcp", ephemeral=True)])
            tmp = port_file + ".tmp"
            with open(tmp, "w") as f:
                f.write(str(ports["tcp"]))
            os.rename(tmp, port_file)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "SYNC_FLUSH")
