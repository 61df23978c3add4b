"""Pending transactions survive restarts: in-process (clean shutdown) and a SIGKILLed broker process.

Real time with short transaction timeouts; the producer speaks the Java client's frames."""

import signal

import trio

from core.remoting import RemotingCommand, RequestCode, decode_json

from txnode import broker_node
from javawire import COMMIT, ROLLBACK, UNKNOWN, JavaProducer, messages, wait_for_message
from serve_process import ServeProcess, free_port

SLOW = {"transaction_timeout": 60_000, "transaction_check_interval": 60_000}
FAST = {"transaction_timeout": 500, "transaction_check_interval": 500}


async def test_commit_after_a_restart(nursery, tmp_path):
    root = tmp_path / "s"
    async with broker_node(root, **SLOW) as node:
        p = JavaProducer(nursery, node.addr)
        await p.heartbeat()
        committed = await p.send_half("TxA", b"committed")
        rolled = await p.send_half("TxA", b"rolled")
        open_ = await p.send_half("TxA", b"open")
        await p.end(committed, COMMIT)
        await p.end(rolled, ROLLBACK)
        await p.end(open_, UNKNOWN)
        with trio.fail_after(5):
            while node.transactions.rolled_back + node.transactions.committed < 2:
                await trio.sleep(0.02)
        p.close()
    async with broker_node(root, **SLOW) as node:
        tx = node.transactions
        assert tx.pending == 1 and [t.queue_offset for t in tx.pending_transactions()] == [2]
        p = JavaProducer(nursery, node.addr)
        await p.end(open_, COMMIT)  # the original send's offsets still name the half
        await p.end(committed, COMMIT)  # already ended before the restart: nothing happens
        with trio.fail_after(5):
            while tx.pending:
                await trio.sleep(0.02)
        await trio.sleep(0.2)
        assert [m.body for m in await messages(node.broker, "TxA", 0)] == [b"committed", b"open"]
        assert tx.committed == 1
        p.close()
    async with broker_node(root, **SLOW) as node:
        assert node.transactions.pending == 0 and node.transactions.half_offset == 3


async def test_check_after_a_restart_continues_the_count(nursery, tmp_path):
    root = tmp_path / "s"
    async with broker_node(root, **FAST) as node:
        p = JavaProducer(nursery, node.addr, answer=lambda m: UNKNOWN)
        await p.heartbeat()
        await p.send_half("TxB", b"pending", queue_id=3)
        await p.wait_checks(1, timeout=5)
        p.close()
    async with broker_node(root, **FAST) as node:
        assert node.transactions.pending == 1
        p = JavaProducer(nursery, node.addr, answer=lambda m: COMMIT)
        await p.heartbeat()
        await p.wait_checks(1, timeout=5)
        _t, _cmd, checked = p.checks[0]
        assert checked.body == b"pending" and checked.queue_id == 3
        assert checked.properties["TRANSACTION_CHECK_TIMES"] == "2"
        real = await wait_for_message(node.broker, "TxB", 3, timeout=5)
        assert real.body == b"pending" and real.sysflag & 0xC == 8
        p.close()


async def test_sigkill_with_pending_halves_then_restart_checks_them_again(nursery, tmp_path):
    config = tmp_path / "broker.toml"
    config.write_text("[broker]\ntransactionTimeOut = 500\ntransactionCheckInterval = 500\n")
    port = free_port()
    args = ("--config", str(config), "--broker-port", str(port))
    server = ServeProcess(tmp_path / "data", *args, role="broker")
    addr = f"127.0.0.1:{port}"
    try:
        await trio.to_thread.run_sync(server.start)
        p = JavaProducer(nursery, addr, answer=lambda m: UNKNOWN)
        await p.heartbeat()
        sent = [await p.send_half("TxK", b"k%d" % i, queue_id=i) for i in range(3)]
        await p.end(sent[0], COMMIT)
        await p.wait_checks(2, timeout=10)  # the two open ones were checked at least once
        p.close()
        server.proc.send_signal(signal.SIGKILL)
        await trio.to_thread.run_sync(server.proc.wait)
        server.log.close()

        await trio.to_thread.run_sync(server.start)
        p = JavaProducer(nursery, addr, answer=lambda m: COMMIT)
        info = decode_json((await p.client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO),
                                                  5)).body)["table"]
        assert info["transactionHalfPending"] == "2"
        await p.heartbeat()
        await p.wait_checks(2, timeout=10)
        assert sorted(m.body for _t, _c, m in p.checks[:2]) == [b"k1", b"k2"]
        with trio.fail_after(10):
            while True:
                got = {}
                for qid in range(3):
                    req = RemotingCommand.request(RequestCode.PULL_MESSAGE, {
                        "consumerGroup": "G", "topic": "TxK", "queueId": qid, "queueOffset": 0, "maxMsgNums": 32,
                        "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*",
                        "subVersion": 0})
                    resp = await p.client.invoke(addr, req, 5)
                    got[qid] = resp.code
                if all(code == 0 for code in got.values()):
                    break
                await trio.sleep(0.1)
        info = decode_json((await p.client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO),
                                                  5)).body)["table"]
        assert info["transactionHalfPending"] == "0"
        p.close()
    finally:
        await trio.to_thread.run_sync(server.kill)
