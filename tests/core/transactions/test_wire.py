"""Transactions as the Java client speaks them (raw frames), broker in-process on the autojump clock.

Half parking, END_TRANSACTION (oneway and sync, with its checks), check-back
with default and short timings, immunity, waiting (uncounted) while no
producer is connected, discard after the last check or past
fileReservedTime, idempotency, delays applied at commit."""

import time

import pytest
import trio

from core.broker import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from core.broker.topics import TRANS_CHECK_MAX_TIME_TOPIC
from core.remoting import RemotingCommand, RequestCode, decode_json
from core.store.message import Message, offset_msg_id, parse_offset_msg_id

from txnode import broker_node
from javawire import COMMIT, LONG, ROLLBACK, UNKNOWN, JavaProducer, messages, until, wait_for_message


async def test_half_is_parked_then_commit_shows_it(clock, tmp_path, nursery):
    async with broker_node(tmp_path / "s") as node:
        p = JavaProducer(nursery, node.addr)
        await p.heartbeat()
        resp = await p.send_half("TxT", b"hello", queue_id=1, props={"TAGS": "A", "KEYS": "k1"})
        assert resp.get_int("queueId") == 1 and resp.get_long("queueOffset") == 0
        _host, half_offset = parse_offset_msg_id(resp.get_str("msgId"))
        assert await messages(node.broker, "TxT", 1) == []
        [half] = await messages(node.broker, TRANS_HALF_TOPIC, 0)
        assert half.physical_offset == half_offset and half.sysflag & 0xC == 0
        assert half.properties["REAL_TOPIC"] == "TxT" and half.properties["REAL_QID"] == "1"
        assert half.properties["PGROUP"] == "PG" and half.properties["TRAN_MSG"] == "true"
        await until(lambda: node.transactions.pending == 1)

        await p.end(resp, COMMIT)
        real = await wait_for_message(node.broker, "TxT", 1)
        assert real.body == b"hello" and real.sysflag & 0xC == 0x8
        assert real.prepared_transaction_offset == half_offset
        assert real.born_timestamp == half.born_timestamp and real.born_host == half.born_host
        assert real.properties["UNIQ_KEY"] == half.properties["UNIQ_KEY"] and real.tags == "A" and real.keys == ["k1"]
        assert "TRAN_MSG" not in real.properties and "REAL_TOPIC" not in real.properties
        await until(lambda: node.transactions.committed == 1)
        [op] = await messages(node.broker, TRANS_OP_HALF_TOPIC, 0)
        assert op.body == b"0" and op.tags == "d"
        assert node.transactions.pending == 0 and node.transactions.committed == 1
        assert node.broker.query_offset("CID_RMQ_SYS_TRANS", TRANS_HALF_TOPIC, 0) == 1
        await trio.sleep(30)  # past any check: nothing more happens
        assert p.checks == [] and len(await messages(node.broker, "TxT", 1)) == 1
        p.close()


async def test_rollback_never_shows_it(clock, tmp_path, nursery):
    async with broker_node(tmp_path / "s", transaction_timeout=1000, transaction_check_interval=1000) as node:
        p = JavaProducer(nursery, node.addr, answer=lambda m: COMMIT)  # a check would commit it: there must be none
        await p.heartbeat()
        resp = await p.send_half("TxT", b"no")
        await p.end(resp, ROLLBACK)
        with trio.fail_after(LONG):
            while node.transactions.rolled_back == 0:
                await trio.sleep(0.01)
        await trio.sleep(20)
        assert p.checks == [] and await messages(node.broker, "TxT", 0) == []
        assert [m.body for m in await messages(node.broker, TRANS_OP_HALF_TOPIC, 0)] == [b"0"]
        assert node.transactions.pending == 0
        p.close()


async def test_unknown_is_checked_at_the_default_times_and_a_commit_answer_shows_it(clock, tmp_path, nursery):
    answers = iter([UNKNOWN, COMMIT])
    async with broker_node(tmp_path / "s") as node:  # transactionTimeOut 6 s, transactionCheckInterval 60 s
        p = JavaProducer(nursery, node.addr, answer=lambda m: next(answers))
        await p.heartbeat()
        sent_at = trio.current_time()
        resp = await p.send_half("TxT", b"late", queue_id=2)
        await p.end(resp, UNKNOWN)
        await p.wait_checks(2)
        (t1, c1, m1), (t2, c2, m2) = p.checks
        assert 6 <= t1 - sent_at < 7 and 66 <= t2 - sent_at < 67.5
        real = await wait_for_message(node.broker, "TxT", 2)
        assert real.body == b"late" and real.sysflag & 0xC == 0x8
        await until(lambda: node.transactions.committed == 1)
        uniq = real.properties["UNIQ_KEY"]
        halves = await messages(node.broker, TRANS_HALF_TOPIC, 0)
        assert [h.properties.get("TRANSACTION_CHECK_TIMES") for h in halves] == [None, "1", "2"]
        for (t, cmd, msg), copy in zip(p.checks, halves[1:]):
            # the header names the re-appended copy; the body shows the message as sent
            assert cmd.get_long("tranStateTableOffset") == copy.queue_offset
            assert cmd.get_long("commitLogOffset") == copy.physical_offset
            assert cmd.get_str("offsetMsgId") == offset_msg_id(copy.store_host, copy.physical_offset)
            assert cmd.get_str("msgId") == uniq and cmd.get_str("transactionId") == uniq
            assert msg.topic == "TxT" and msg.queue_id == 2 and msg.body == b"late"
            assert msg.queue_offset == copy.queue_offset and msg.physical_offset == copy.physical_offset
            assert msg.properties["PGROUP"] == "PG"
        assert real.prepared_transaction_offset == halves[2].physical_offset
        assert [m.body for m in await messages(node.broker, TRANS_OP_HALF_TOPIC, 0)] == [b"2"]
        assert node.transactions.checks_sent == 2 and node.transactions.pending == 0
        p.close()


@pytest.mark.parametrize("immunity_s, first_check_s", [(20, 20), (2, 6)])
async def test_check_immunity_delays_the_first_check_never_below_the_timeout(clock, tmp_path, nursery, immunity_s,
                                                                              first_check_s):
    async with broker_node(tmp_path / "s") as node:
        p = JavaProducer(nursery, node.addr, answer=lambda m: ROLLBACK)
        await p.heartbeat()
        sending = trio.current_time()
        await p.send_half("TxT", b"x", props={"CHECK_IMMUNITY_TIME_IN_SECONDS": str(immunity_s)})
        stored = trio.current_time()  # the send made the topic (a file write in a thread: the clock may jump)
        await p.wait_checks(1)
        assert p.checks[0][0] - sending >= first_check_s
        assert p.checks[0][0] - stored < first_check_s + 1
        with trio.fail_after(LONG):
            while node.transactions.pending:
                await trio.sleep(0.01)
        assert node.transactions.rolled_back == 1 and await messages(node.broker, "TxT", 0) == []
        p.close()


async def test_a_producer_away_longer_than_the_check_count_is_waited_for_then_its_commit_shows(clock, tmp_path,
                                                                                                nursery):
    """Issue 17: checks that reach no producer are not counted; the half waits, unchanged."""
    async with broker_node(tmp_path / "s", transaction_timeout=1000, transaction_check_interval=1000,
                           transaction_check_max=3) as node:
        p = JavaProducer(nursery, node.addr)
        await p.heartbeat()
        await p.send_half("TxT", b"orphan", props={"TAGS": "T"})
        p.close()  # the producer goes away before ending its transaction
        tx = node.transactions
        await until(lambda: not [c for c in tx.producer_channels("PG") if not c.closed])  # the broker saw it go
        seen, attempts = 0, []
        with trio.fail_after(LONG):
            while tx.checks_unreachable < 10 and tx.discarded == 0:  # over three times transactionCheckMax x interval
                if tx.checks_unreachable != seen:
                    seen = tx.checks_unreachable
                    attempts.append(trio.current_time())
                await trio.sleep(0.1)  # each step costs 10 ms of real time (the autojump threshold)
        gaps = [round(b - a) for a, b in zip(attempts, attempts[1:])]
        assert set(gaps) == {1}, gaps  # tried again every interval, no back-off
        assert tx.discarded == 0 and tx.pending == 1 and tx.checks_sent == 0
        assert len(await messages(node.broker, TRANS_HALF_TOPIC, 0)) == 1  # no copy per attempt
        assert await messages(node.broker, TRANS_CHECK_MAX_TIME_TOPIC, 0) == []

        # the producer (its application) comes back: asked at the next interval, it commits
        p2 = JavaProducer(nursery, node.addr, answer=lambda m: COMMIT)
        await p2.heartbeat()
        await p2.wait_checks(1)
        assert p2.checks[0][2].properties["TRANSACTION_CHECK_TIMES"] == "1"
        real = await wait_for_message(node.broker, "TxT", 0)
        assert real.body == b"orphan" and real.sysflag & 0xC == 0x8
        await until(lambda: tx.committed == 1 and tx.pending == 0)
        assert tx.discarded == 0
        p2.close()


async def test_a_producer_answering_unknown_each_time_is_rolled_back_after_the_last_check(clock, tmp_path, nursery):
    async with broker_node(tmp_path / "s", transaction_timeout=1000, transaction_check_interval=1000,
                           transaction_check_max=3) as node:
        p = JavaProducer(nursery, node.addr, answer=lambda m: UNKNOWN)
        await p.heartbeat()
        start = trio.current_time()
        resp = await p.send_half("TxT", b"undecided", props={"TAGS": "T"})
        tx = node.transactions
        await until(lambda: tx.discarded == 1, step=0.1)
        assert 3.9 < trio.current_time() - start < 6  # checks at 1, 2, 3 s; rolled back at the next due time
        assert [m.properties["TRANSACTION_CHECK_TIMES"] for _t, _c, m in p.checks] == ["1", "2", "3"]
        assert tx.checks_sent == 3 and tx.checks_unreachable == 0 and tx.pending == 0
        assert await messages(node.broker, "TxT", 0) == []
        [kept] = await messages(node.broker, TRANS_CHECK_MAX_TIME_TOPIC, 0)
        assert kept.body == b"undecided" and kept.properties["TRANSACTION_CHECK_TIMES"] == "3"
        halves = await messages(node.broker, TRANS_HALF_TOPIC, 0)
        assert [m.body for m in await messages(node.broker, TRANS_OP_HALF_TOPIC, 0)] == [str(halves[-1].queue_offset).encode()]

        ack = await p.end_sync(resp, COMMIT)  # too late: nothing shows
        assert ack.code == 0
        assert await messages(node.broker, "TxT", 0) == [] and tx.committed == 0
        p.close()


async def test_a_half_older_than_file_reserved_time_is_rolled_back_without_a_check(clock, tmp_path, nursery):
    async with broker_node(tmp_path / "s", transaction_timeout=1000, file_reserved_time=1) as node:
        p = JavaProducer(nursery, node.addr, answer=lambda m: COMMIT)
        await p.heartbeat()
        await p.send_half("TxT", b"stale", born_ms=int(time.time() * 1000) - 3_601_000)
        await p.send_half("TxT", b"fresh")
        tx = node.transactions
        await until(lambda: tx.halves == 2 and tx.pending == 0, step=0.1)
        assert tx.discarded == 1 and tx.committed == 1
        assert [m.body for _t, _c, m in p.checks] == [b"fresh"]
        assert [m.body for m in await messages(node.broker, "TxT", 0)] == [b"fresh"]
        [kept] = await messages(node.broker, TRANS_CHECK_MAX_TIME_TOPIC, 0)
        assert kept.body == b"stale"
        p.close()


async def test_sync_end_transaction_checks_the_half_and_is_idempotent(clock, tmp_path, nursery):
    async with broker_node(tmp_path / "s") as node:
        p = JavaProducer(nursery, node.addr)
        await p.heartbeat()
        resp = await p.send_half("TxT", b"once")
        bad_group = await p.end_sync(resp, COMMIT, group="OTHER")
        assert (bad_group.code, bad_group.remark) == (1, "The producer group wrong")
        bad_offset = await p.end_sync(resp, COMMIT, table_offset=5)
        assert (bad_offset.code, bad_offset.remark) == (1, "The transaction state table offset wrong")
        bogus = RemotingCommand.request(RequestCode.END_TRANSACTION, {
            "producerGroup": "PG", "tranStateTableOffset": "0", "commitLogOffset": "999999", "commitOrRollback": "8",
            "msgId": "X"})
        assert (await p.client.invoke(node.addr, bogus, LONG)).code == 1
        missing = RemotingCommand.request(RequestCode.END_TRANSACTION, {"producerGroup": "PG"})
        assert (await p.client.invoke(node.addr, missing, LONG)).code == 1
        assert (await p.end_sync(resp, UNKNOWN)).code == 0
        await until(lambda: node.transactions.pending == 1)

        assert (await p.end_sync(resp, COMMIT)).code == 0
        assert (await p.end_sync(resp, COMMIT)).code == 0
        assert (await p.end_sync(resp, ROLLBACK)).code == 0
        await p.end(resp, COMMIT)
        await trio.sleep(1)
        assert [m.body for m in await messages(node.broker, "TxT", 0)] == [b"once"]
        assert len(await messages(node.broker, TRANS_OP_HALF_TOPIC, 0)) == 1
        tx = node.transactions
        assert (tx.committed, tx.rolled_back, tx.pending) == (1, 0, 0)
        p.close()


async def test_a_late_end_for_the_original_half_ends_the_checked_copy_too(clock, tmp_path, nursery):
    async with broker_node(tmp_path / "s", transaction_timeout=1000, transaction_check_interval=1000) as node:
        p = JavaProducer(nursery, node.addr, answer=lambda m: None)  # checks are not answered
        await p.heartbeat()
        resp = await p.send_half("TxT", b"slow")
        await p.wait_checks(2)
        await p.end(resp, COMMIT)  # the local transaction finally ends, naming the first half
        await wait_for_message(node.broker, "TxT", 0)
        n_checks = len(p.checks)
        await trio.sleep(10)
        assert len(p.checks) == n_checks and node.transactions.pending == 0
        assert len(await messages(node.broker, "TxT", 0)) == 1
        p.close()


async def test_delay_level_and_timer_apply_at_commit_not_to_the_half(clock, tmp_path, nursery):
    async with broker_node(tmp_path / "s", timers=True, transaction_timeout=1000,
                           transaction_check_interval=1000) as node:
        answers = {}
        p = JavaProducer(nursery, node.addr, answer=lambda m: answers.get(m.body))
        await p.heartbeat()
        delayed = await p.send_half("TxT", b"delayed", props={"DELAY": "3"})  # test level 3 = 1 s
        timed = await p.send_half("TxT", b"timed", queue_id=1, props={"TIMER_DELAY_SEC": "5"})
        await p.wait_checks(2)  # each half was checked (and re-appended) once, unanswered
        assert await messages(node.broker, "SCHEDULE_TOPIC_XXXX", 2) == []
        assert await messages(node.broker, "rmq_sys_wheel_timer", 0) == []
        bodies = [(m.body, m.properties.get("DELAY"), m.properties.get("TIMER_DELAY_SEC")) for _t, _c, m in p.checks]
        assert sorted(bodies) == [(b"delayed", "3", None), (b"timed", None, "5")]  # checks show the message as sent
        answers.update({b"delayed": COMMIT, b"timed": COMMIT})
        committed_at = trio.current_time()
        with trio.fail_after(LONG):
            while node.transactions.committed < 2:
                await trio.sleep(0.01)
        assert await messages(node.broker, "TxT", 0) == [] and await messages(node.broker, "TxT", 1) == []
        d = await wait_for_message(node.broker, "TxT", 0)
        assert 0.9 <= trio.current_time() - committed_at < 3
        t = await wait_for_message(node.broker, "TxT", 1)
        assert 4.5 <= trio.current_time() - committed_at < 7
        assert d.body == b"delayed" and t.body == b"timed"
        assert delayed.code == timed.code == 0
        p.close()


async def test_runtime_info_shows_pending_transactions_and_timers(clock, tmp_path, nursery):
    async with broker_node(tmp_path / "s", timers=True) as node:
        p = JavaProducer(nursery, node.addr)
        await p.heartbeat()
        for i in range(3):
            await p.send_half("TxT", b"p%d" % i)
        await p.client.invoke(node.addr, p.half_request("TxT", b"t", props={"TIMER_DELAY_SEC": "60"}), LONG)
        sent = await p.send_half("TxT", b"c")
        await p.end(sent, COMMIT)
        for i in range(2):  # two timers (the half's timer is not one until it is committed)
            assert (await node.broker.send(Message("TxT", b"t%d" % i, properties={"TIMER_DELAY_SEC": "60"}))).ok
        await until(lambda: node.transactions.committed == 1 and node.transactions.pending == 4
                    and node.broker.timers.scheduled == 2)
        resp = await p.client.invoke(node.addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), LONG)
        table = decode_json(resp.body)["table"]
        assert table["transactionHalfPending"] == "4" and table["transactionCommitted"] == "1"
        assert table["transactionCheckSent"] == "0" and table["transactionHalfOffset"] == "0"
        assert (table["timerPending"], table["timerScheduled"], table["timerFired"]) == ("2", "2", "0")
        await trio.sleep(61)
        resp = await p.client.invoke(node.addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), LONG)
        table = decode_json(resp.body)["table"]
        rolls = int(table["timerRolled"])  # this node's wheel window is short: a roll is filed again
        assert (table["timerPending"], table["timerFired"], table["timerScheduled"]) == ("0", "2", str(2 + rolls))
        p.close()


async def test_tran_msg_without_the_prepared_sysflag_is_still_a_half(clock, tmp_path, nursery):
    """Java decides by the TRAN_MSG property; the delay and timer hooks (which run first) must not keep it."""
    async with broker_node(tmp_path / "s", timers=True) as node:
        p = JavaProducer(nursery, node.addr)
        await p.heartbeat()
        sent = []
        for props in ({"DELAY": "1"}, {"TIMER_DELAY_SEC": "2"}):
            req = p.half_request("TxT", b"x", props=props)
            req.ext_fields["f"] = "0"
            resp = await p.client.invoke(node.addr, req, LONG)
            assert resp.code == 0
            sent.append(resp)
        assert await messages(node.broker, "SCHEDULE_TOPIC_XXXX", 0) == []
        assert await messages(node.broker, "rmq_sys_wheel_timer", 0) == []
        halves = await messages(node.broker, TRANS_HALF_TOPIC, 0)
        assert [h.properties.get("TRAN_HELD_DELAY") for h in halves] == ["1", None]
        assert "TRAN_HELD_TIMER_DELIVER_MS" in halves[1].properties  # the timer hook had turned it absolute
        await until(lambda: node.transactions.pending == 2)
        for resp in sent:
            await p.end(resp, COMMIT)
        start = trio.current_time()
        await wait_for_message(node.broker, "TxT", 0)
        with trio.fail_after(LONG):
            while len(await messages(node.broker, "TxT", 0)) < 2:
                await trio.sleep(0.05)
        assert trio.current_time() - start < 3
        p.close()
