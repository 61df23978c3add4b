"""The Java client's transaction frames (DefaultMQProducerImpl / MQClientAPIImpl 4.9.x), over our remoting client.

SEND_MESSAGE_V2 with TRAN_MSG=true, PGROUP and sysFlag 0x4; END_TRANSACTION
oneway with commitLogOffset from the offset msgId and tranStateTableOffset =
the send's queueOffset; CHECK_TRANSACTION_STATE answered with
END_TRANSACTION fromTransactionCheck=true (ClientRemotingProcessor)."""

from __future__ import annotations

import itertools
import time

import trio

from core.remoting import LanguageCode, RemotingCommand, RequestCode, encode_json
from core.remoting.client import RemotingClient
from core.store.message import decode_message, encode_properties, parse_offset_msg_id

COMMIT, ROLLBACK, UNKNOWN = 8, 12, 0
LONG = 1e6  # call timeouts that never fire first on the autojump clock
_ids = itertools.count(1)


def uniq_key() -> str:
    return f"7F000001{next(_ids):024X}"


class JavaProducer:
    """One producer group's connection to one broker, Java style.

    ``answer(check_message) -> state`` decides the answers to checks (None: do not answer)."""

    def __init__(self, nursery: trio.Nursery, addr: str, group: str = "PG", answer=None):
        self.addr = addr
        self.group = group
        self.answer = answer
        self.checks: list[tuple[float, RemotingCommand, object]] = []  # (trio time, request, decoded message)
        self.checked = trio.Event()
        self.client = RemotingClient(nursery, handlers={RequestCode.CHECK_TRANSACTION_STATE: self._on_check},
                                     language=LanguageCode.JAVA, version=405, connect_timeout=LONG)
        self.client_id = f"127.0.0.1@{group}-{id(self)}"

    async def heartbeat(self) -> None:
        body = {"clientID": self.client_id, "consumerDataSet": [],
                "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}, {"groupName": self.group}]}
        resp = await self.client.invoke(self.addr, RemotingCommand.request(
            RequestCode.HEART_BEAT, None, encode_json(body, standard=False).encode()), LONG)
        assert resp.code == 0, resp.remark

    def half_request(self, topic: str, body: bytes, *, queue_id: int = 0, props: dict | None = None,
                     group: str | None = None, born_ms: int | None = None) -> RemotingCommand:
        p = {"TRAN_MSG": "true", "PGROUP": group or self.group, "UNIQ_KEY": uniq_key(), "WAIT": "true"}
        p.update(props or {})
        ext = {"a": group or self.group, "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "4",
               "g": str(int(time.time() * 1000) if born_ms is None else born_ms), "h": "0", "i": encode_properties(p), "j": "0", "k": "false",
               "m": "false"}
        return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, body)

    async def send_half(self, topic: str, body: bytes, **kw) -> RemotingCommand:
        resp = await self.client.invoke(self.addr, self.half_request(topic, body, **kw), LONG)
        assert resp.code == 0, resp.remark
        return resp

    def end_request(self, send_resp: RemotingCommand, state: int, *, uniq: str = "X", from_check: bool = False,
                    group: str | None = None, table_offset: int | None = None) -> RemotingCommand:
        _host, offset = parse_offset_msg_id(send_resp.get_str("msgId"))
        ext = {"producerGroup": group or self.group,
               "tranStateTableOffset": str(send_resp.get_long("queueOffset") if table_offset is None else table_offset),
               "commitLogOffset": str(offset), "commitOrRollback": str(state),
               "fromTransactionCheck": "true" if from_check else "false", "msgId": uniq}
        return RemotingCommand.request(RequestCode.END_TRANSACTION, ext, remark=None)

    async def end(self, send_resp: RemotingCommand, state: int, **kw) -> None:
        """Oneway, as every official client sends it."""
        await self.client.invoke_oneway(self.addr, self.end_request(send_resp, state, **kw), LONG)

    async def end_sync(self, send_resp: RemotingCommand, state: int, **kw) -> RemotingCommand:
        return await self.client.invoke(self.addr, self.end_request(send_resp, state, **kw), LONG)

    async def _on_check(self, addr: str, cmd: RemotingCommand) -> None:
        msg = decode_message(cmd.body)
        self.checks.append((trio.current_time(), cmd, msg))
        self.checked.set()
        self.checked = trio.Event()
        state = self.answer(msg) if self.answer else None
        if state is None:
            return None
        ext = {"producerGroup": msg.properties["PGROUP"], "tranStateTableOffset": cmd.get_str("tranStateTableOffset"),
               "commitLogOffset": cmd.get_str("commitLogOffset"), "commitOrRollback": str(state),
               "fromTransactionCheck": "true", "msgId": msg.properties.get("UNIQ_KEY") or cmd.get_str("offsetMsgId"),
               "transactionId": cmd.get_str("transactionId", "")}
        await self.client.invoke_oneway(addr, RemotingCommand.request(RequestCode.END_TRANSACTION, ext), LONG)
        return None

    async def wait_checks(self, n: int, timeout: float = LONG) -> None:
        with trio.fail_after(timeout):
            while len(self.checks) < n:
                await self.checked.wait()

    def close(self) -> None:
        self.client.aclose_nowait()


async def messages(broker, topic: str, queue_id: int = 0):
    """Everything stored in (topic, queue_id), as a consumer would pull it."""
    result = await broker.read_queue(topic, queue_id, 0, 1000)
    return result.messages()


async def wait_for_message(broker, topic: str, queue_id: int = 0, timeout: float = LONG):
    with trio.fail_after(timeout):
        await broker.wait_for_messages(topic, queue_id, 0)
    return (await messages(broker, topic, queue_id))[0]


async def until(predicate, timeout: float = LONG, step: float = 0.01) -> None:
    """Poll ``predicate()`` (the broker's services work in their own tasks)."""
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(step)
