"""Our Python TransactionProducer against a name server and broker on 127.0.0.1 (real time, short timeouts)."""

import threading

import trio

from core.client import Message
from core.client.model import ConsumeFromWhere
from core.client.push_consumer import open_push_consumer
from core.client.transaction import (
    LocalTransactionState, TransactionProducer, open_transaction_producer,
)
from core.namesrv import run_namesrv

from txnode import broker_node
from javawire import messages

FAST = {"transaction_timeout": 500, "transaction_check_interval": 500}


class Listener:
    def __init__(self, execute, check=LocalTransactionState.UNKNOWN):
        self.execute, self.check = execute, check
        self.executed, self.checked = [], []

    def execute_local_transaction(self, msg, arg):
        self.executed.append((msg.properties["UNIQ_KEY"], arg))
        if isinstance(self.execute, Exception):
            raise self.execute
        return self.execute

    async def check_local_transaction(self, msg):
        self.checked.append(msg)
        return self.check


class Collector:
    def __init__(self):
        self.msgs = []
        self.changed = trio.Event()

    def __call__(self, msgs, ctx):
        self.msgs.extend(msgs)
        self.changed.set()
        self.changed = trio.Event()

    async def until(self, n, timeout=10.0):
        with trio.fail_after(timeout):
            while len(self.msgs) < n:
                await self.changed.wait()


async def start(nursery, tmp_path, **config):
    ns_port = await nursery.start(run_namesrv, "127.0.0.1", 0)
    namesrv = f"127.0.0.1:{ns_port}"
    return namesrv, broker_node(tmp_path / "store", namesrv, **{**FAST, **config})


async def test_commit_shows_the_message_to_a_consumer(nursery, tmp_path):
    namesrv, node_cm = await start(nursery, tmp_path)
    async with node_cm as node:
        listener = Listener(LocalTransactionState.COMMIT)
        async with open_transaction_producer(namesrv, "TPG", listener) as producer:
            result = await producer.send_message_in_transaction(Message("TxC", "paid", tags="order"), arg=42)
        assert result.ok and result.local_transaction_state is LocalTransactionState.COMMIT
        assert listener.executed == [(result.msg_id, 42)]
        got = Collector()
        async with open_push_consumer(namesrv, "TCG", {"TxC": "*"}, got,
                                      consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET):
            await got.until(1)
        [m] = got.msgs
        assert m.body == b"paid" and m.tags == "order" and m.msg_id == result.msg_id and m.sysflag & 0xC == 8
        assert "TRAN_MSG" not in m.properties and m.properties["PGROUP"] == "TPG"
        assert node.transactions.committed == 1 and node.transactions.pending == 0


async def test_rollback_and_a_raising_listener_never_show_the_message(nursery, tmp_path):
    namesrv, node_cm = await start(nursery, tmp_path)
    async with node_cm as node:
        rollback = Listener(LocalTransactionState.ROLLBACK_MESSAGE)
        async with open_transaction_producer(namesrv, "TPG", rollback) as producer:
            r = await producer.send_message_in_transaction(Message("TxR", "no"))
        assert r.local_transaction_state is LocalTransactionState.ROLLBACK
        # a listener that raises: UNKNOWN, and its checks say rollback
        raising = Listener(RuntimeError("db down"), check=LocalTransactionState.ROLLBACK)
        async with open_transaction_producer(namesrv, "TPG2", raising) as producer:
            r2 = await producer.send_message_in_transaction(Message("TxR", "boom"))
            assert r2.local_transaction_state is LocalTransactionState.UNKNOWN
            with trio.fail_after(10):
                while node.transactions.rolled_back < 2:
                    await trio.sleep(0.05)
        assert len(raising.checked) == 1 and raising.checked[0].body == b"boom"
        await trio.sleep(1.5)  # several check intervals: nothing comes back
        for qid in range(4):
            assert await messages(node.broker, "TxR", qid) == []
        assert node.transactions.pending == 0 and not rollback.checked


async def test_unknown_then_a_check_answered_commit_shows_it(nursery, tmp_path):
    namesrv, node_cm = await start(nursery, tmp_path)
    async with node_cm as node:
        listener = Listener(LocalTransactionState.UNKNOWN, check=LocalTransactionState.COMMIT)
        got = Collector()
        async with open_push_consumer(namesrv, "TCG", {"TxU": "*"}, got,
                                      consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET):
            async with open_transaction_producer(namesrv, "TPG", listener) as producer:
                result = await producer.send_message_in_transaction(Message("TxU", "later", keys=["o-1"]))
                assert result.local_transaction_state is LocalTransactionState.UNKNOWN
                await got.until(1)
                assert producer.checks_answered == 1
        [checked] = listener.checked
        assert checked.topic == "TxU" and checked.body == b"later" and checked.msg_id == result.msg_id
        assert checked.keys == ["o-1"] and checked.queue_id == result.queue.queue_id
        [m] = got.msgs
        assert m.body == b"later" and m.msg_id == result.msg_id and m.keys == ["o-1"]


async def test_blocking_facade_with_plain_listener_in_a_thread(nursery, tmp_path):
    namesrv, node_cm = await start(nursery, tmp_path)
    async with node_cm as node:
        threads = []

        class Plain:
            def execute_local_transaction(self, msg, arg):
                threads.append(threading.current_thread())
                return LocalTransactionState.COMMIT

            def check_local_transaction(self, msg):
                return LocalTransactionState.COMMIT

        def run():
            with TransactionProducer(namesrv, "TPGB", Plain()) as p:
                return p.send_message_in_transaction(Message("TxB", "blocking"))

        result = await trio.to_thread.run_sync(run)
        assert result.local_transaction_state is LocalTransactionState.COMMIT
        assert threads and threads[0] is not threading.main_thread()
        with trio.fail_after(10):
            await node.broker.wait_for_messages("TxB", result.queue.queue_id, 0)


async def test_mqgate_admin_broker_runtime_shows_pending_transactions(nursery, tmp_path):
    import io
    import json

    from core.admin import run_admin

    namesrv, node_cm = await start(nursery, tmp_path, transaction_timeout=60_000)
    async with node_cm as node:
        async with open_transaction_producer(namesrv, "TPG", Listener(LocalTransactionState.UNKNOWN)) as producer:
            for i in range(2):
                await producer.send_message_in_transaction(Message("TxAdmin", f"open{i}"))
        with trio.fail_after(5):
            while node.transactions.pending < 2:
                await trio.sleep(0.02)
        out, err = io.StringIO(), io.StringIO()
        assert await run_admin(["--namesrv", namesrv, "--json", "broker", "runtime"], out, err) == 0, err.getvalue()
        table = json.loads(out.getvalue())["brokers"]["broker-a"]
        assert table["transactionHalfPending"] == "2" and table["transactionCheckSent"] == "0"
