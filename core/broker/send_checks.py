"""The synchronous half of `Broker`'s send path (mixed into it through
`SendPath`): put hooks, checks, stamps, encoding, the append of prepared
messages and their results. Nothing here awaits, so it is compiled with the
other kernels (setup.py); the rules it keeps are in ``sending.py``'s
docstring.
"""

from __future__ import annotations

import logging
import time

from core.store.encoder import EncodedMessage
from core.store.errors import PutStatus
from core.store.message import (
    MULTI_TAGS_FLAG, PROPERTY_CLUSTER, PROPERTY_TRAN_MSG, PROPERTY_UNIQ_KEY, PROPERTY_WAIT, Message,
)

from .config import PERM_WRITE, BrokerRole
from .hooks import SendHooks
from .results import SendResult, SendStatus
from .topics import NOT_ALLOWED_SEND_TOPICS, TopicConfig, TopicFilterType

try:
    import cython
except ImportError:  # a pure-Python install: nothing here is compiled
    from core.store import _cython_shadow as cython

log = logging.getLogger("core.broker.sending")


# A message past checks, stamps and hooks, waiting for its append, is a tuple (one
# allocation, read by unpacking: this is made for every message):
#   (msg, enc, topic, queue_id, wait, index, refused)
# enc: its EncodedMessage, None when refused after the put hooks (``refused`` says why);
# topic: as the sender gave it (results report this, not a hook's rewrite); index: its
# place in the call's results.
Prepared = tuple


_PUT_TO_SEND = {
    PutStatus.PUT_OK: (SendStatus.SEND_OK, ""),
    PutStatus.FLUSH_DISK_TIMEOUT: (SendStatus.FLUSH_DISK_TIMEOUT, ""),
    PutStatus.FLUSH_SLAVE_TIMEOUT: (SendStatus.FLUSH_SLAVE_TIMEOUT, ""),
    PutStatus.SLAVE_NOT_AVAILABLE: (SendStatus.SLAVE_NOT_AVAILABLE, ""),
    PutStatus.SERVICE_NOT_AVAILABLE: (SendStatus.SERVICE_NOT_AVAILABLE, "service not available now, maybe disk full or the store is shut down"),
    PutStatus.CREATE_MAPEDFILE_FAILED: (SendStatus.SYSTEM_ERROR, "create mapped file failed, server is busy or broken"),
    PutStatus.MESSAGE_ILLEGAL: (SendStatus.MESSAGE_ILLEGAL, "the message is illegal, maybe msg body or properties length not matched"),
    PutStatus.PROPERTIES_SIZE_EXCEEDED: (SendStatus.MESSAGE_ILLEGAL, "the message properties are too long"),
    PutStatus.OS_PAGECACHE_BUSY: (SendStatus.SYSTEM_ERROR, "[PC_SYNCHRONIZED]broker busy, start flow control for a while"),
    PutStatus.UNKNOWN_ERROR: (SendStatus.SYSTEM_ERROR, "UNKNOWN_ERROR"),
    PutStatus.LMQ_CONSUME_QUEUE_NUM_EXCEEDED: (SendStatus.SYSTEM_ERROR, "[LMQ_CONSUME_QUEUE_NUM_EXCEEDED]"),
}

_STORED = frozenset(s for s in SendStatus if s.stored)
_PUT_OK = PutStatus.PUT_OK
_SEND_OK = SendStatus.SEND_OK
_MULTI_TAG = TopicFilterType.MULTI_TAG
_RESULT_FIELDS = ("status", "topic", "queue_id", "queue_offset", "uniq_key", "physical_offset", "store_timestamp",
                  "msg_count", "remark", "_put")

if cython.compiled:  # where `_send_ok` puts a SendResult's fields (send_checks.pxd)
    _AT_STATUS = _slot_offset(SendResult, "status")
    _AT_TOPIC = _slot_offset(SendResult, "topic")
    _AT_QUEUE_ID = _slot_offset(SendResult, "queue_id")
    _AT_QUEUE_OFFSET = _slot_offset(SendResult, "queue_offset")
    _AT_UNIQ_KEY = _slot_offset(SendResult, "uniq_key")
    _AT_PHYS = _slot_offset(SendResult, "physical_offset")
    _AT_STORE_TS = _slot_offset(SendResult, "store_timestamp")
    _AT_COUNT = _slot_offset(SendResult, "msg_count")
    _AT_REMARK = _slot_offset(SendResult, "remark")
    _AT_PUT = _slot_offset(SendResult, "_put")
    _RESULT_BY_SLOTS = (getattr(SendResult, "__slots__", None) == _RESULT_FIELDS
                        and not hasattr(SendResult, "__post_init__")
                        and all((_AT_STATUS, _AT_TOPIC, _AT_QUEUE_ID, _AT_QUEUE_OFFSET, _AT_UNIQ_KEY, _AT_PHYS,
                                 _AT_STORE_TS, _AT_COUNT, _AT_REMARK, _AT_PUT)))


if cython.compiled:  # where `_stamp_each` and the results find a Message's fields (send_checks.pxd)
    _AT_MSG_TOPIC = _slot_offset(Message, "topic")
    _AT_MSG_PROPS = _slot_offset(Message, "properties")
    _AT_MSG_QUEUE_ID = _slot_offset(Message, "queue_id")
    _AT_MSG_STORE_HOST = _slot_offset(Message, "store_host")
    _AT_MSG_BORN_TS = _slot_offset(Message, "born_timestamp")
    _MSG_BY_SLOTS = all((_AT_MSG_TOPIC, _AT_MSG_PROPS, _AT_MSG_QUEUE_ID, _AT_MSG_STORE_HOST, _AT_MSG_BORN_TS))


def _send_ok(topic: str, queue_id: int, queue_offset: int, uniq_key: str | None, phys: int, ts: int,
             put: object) -> SendResult:
    """``SendResult(SEND_OK, topic, queue_id, queue_offset, uniq_key, phys, ts, 1, "", put)``: made for
    every stored message. Compiled, the object is allocated and its ten slots filled in C
    (send_checks.pxd), not through the dataclass's Python ``__init__`` (~2k instructions)."""
    if cython.compiled:
        if _RESULT_BY_SLOTS:
            r = PyType_GenericAlloc(cython.cast(cython.pointer(PyTypeObject), SendResult), 0)
            _put_slot(r, _AT_STATUS, _SEND_OK)
            _put_slot(r, _AT_TOPIC, topic)
            _put_slot(r, _AT_QUEUE_ID, queue_id)
            _put_slot(r, _AT_QUEUE_OFFSET, queue_offset)
            _put_slot(r, _AT_UNIQ_KEY, uniq_key)
            _put_slot(r, _AT_PHYS, phys)
            _put_slot(r, _AT_STORE_TS, ts)
            _put_slot(r, _AT_COUNT, 1)
            _put_slot(r, _AT_REMARK, "")
            _put_slot(r, _AT_PUT, put)
            return r
    return SendResult(_SEND_OK, topic, queue_id, queue_offset, uniq_key, phys, ts, 1, "", put)


def _results_and_stored_hooks(prepared: list, rows: list, ts: int, results: list, waiting: list,
                              stored_hooks: object) -> int:
    """`_store_prepared`'s loop over appended messages, in send order: each one's
    result in ``results`` (and in ``waiting`` if it waits for the flush), then
    its topic's stored hooks (``stored_hooks``, None: no hook at all). ``rows``:
    the store's row of each, None for one it refused. Returns the log end the
    stored ones reach. Compiled (send_checks.pxd), the tuples, the rows and
    the `EncodedMessage` fields are read as C objects."""
    illegal = _PUT_TO_SEND[PutStatus.MESSAGE_ILLEGAL]
    by_topic = stored_hooks.by_topic if stored_hooks is not None else None
    end = 0
    for i in range(len(prepared)):
        p = prepared[i]
        msg = p[0]
        row = rows[i]
        refused = p[6]
        if refused is not None:
            r = refused
        elif row is None:
            enc = p[1]
            r = SendResult(illegal[0], topic=p[2], queue_id=p[3],
                           remark=f"the message is {enc.size} bytes stored, more than the store takes")
        else:
            enc = p[1]
            phys_obj = row[0]
            r = _send_ok(p[2], p[3], row[1], enc.uniq_key or None, phys_obj, ts, enc)
            phys = phys_obj
            reach = phys + enc.size
            if reach > end:
                end = reach
            if p[4]:
                waiting.append(r)
        index = p[5]
        results[index] = r
        if by_topic is not None:  # `_stored` inlined: this runs for every message
            # not the sender's topic (p[2]): a put hook may have moved the message
            if cython.compiled and _MSG_BY_SLOTS and type(msg) is Message:
                stored_on = _slot(msg, _AT_MSG_TOPIC, "topic")
            else:
                stored_on = msg.topic
            hooks = by_topic.get(stored_on)
            if hooks is None:
                hooks = stored_hooks.for_topic(stored_on)
            for hook in hooks:
                try:
                    hook(msg, r)
                except Exception:
                    log.exception("stored hook %r failed for a message to %s", hook, r.topic)
    return end


def _stamp_each(msgs: list, places: list, cluster: str, host: bytes, waits: list, keyless: list) -> None:
    """`SendChecks._stamp_many`'s loop: for each message, in order, WAIT taken
    out (``waits``: whether its sender waits), CLUSTER set, its properties
    added to ``keyless`` if they have no UNIQ_KEY, queue id, store host, born
    time (when 0: one clock read for all) and the multi-tag flag. Compiled
    (send_checks.pxd), an exact `Message`'s fields are read and written in
    their slots, and a dict of properties through the dict's C calls."""
    now = 0
    last = None
    multi = False
    for i in range(len(msgs)):
        msg = msgs[i]
        place = places[i]
        if place is not last:  # a batch's messages mostly share their (config, queue id): read once
            last = place
            multi = place[0].topic_filter_type is _MULTI_TAG
        if cython.compiled:
            if _MSG_BY_SLOTS and type(msg) is Message:
                props_obj = _slot(msg, _AT_MSG_PROPS, "properties")
                if type(props_obj) is dict:
                    props = cython.cast(dict, props_obj)
                    waits.append(props.pop(PROPERTY_WAIT, None) != "false")
                    props[PROPERTY_CLUSTER] = cluster
                    if PROPERTY_UNIQ_KEY not in props:
                        keyless.append(props)
                    _set_slot(msg, _AT_MSG_QUEUE_ID, place[1])
                    _set_slot(msg, _AT_MSG_STORE_HOST, host)
                    if not _slot(msg, _AT_MSG_BORN_TS, "born_timestamp"):
                        if not now:
                            now = time.time_ns() // 1_000_000
                        _set_slot(msg, _AT_MSG_BORN_TS, now)
                    if multi:
                        msg.sysflag |= MULTI_TAGS_FLAG
                    continue
        any_props = msg.properties  # any mapping, by its own methods
        waits.append(any_props.pop(PROPERTY_WAIT) != "false" if PROPERTY_WAIT in any_props else True)
        any_props[PROPERTY_CLUSTER] = cluster
        if PROPERTY_UNIQ_KEY not in any_props:
            keyless.append(any_props)
        msg.queue_id = place[1]
        msg.store_host = host
        if not msg.born_timestamp:
            if not now:
                now = time.time_ns() // 1_000_000
            msg.born_timestamp = now
        if multi:
            msg.sysflag |= MULTI_TAGS_FLAG


def _hooks_and_encoding(checks: SendChecks, msgs: list, places: list, indexes: list, waits: list,
                        prepared: list) -> None:
    """`SendChecks._prepare_many`'s loop over the stamped messages, in order:
    the put hooks (those of `SendHooks.add_put_hook` whose ``when`` names a
    property the message has, else the ones that always run), then the
    encoding; each message appended to ``prepared`` as a `Prepared`. Compiled
    (send_checks.pxd), the properties of an exact `Message` are looked at
    through the dict's C calls and the record is encoded without a call
    through its class."""
    must_wait = checks._must_wait
    always = checks._put_always
    triggers = checks._put_triggers
    for i in range(len(msgs)):
        msg = msgs[i]
        place = places[i]
        if cython.compiled and _MSG_BY_SLOTS and type(msg) is Message:
            topic = _slot(msg, _AT_MSG_TOPIC, "topic")
            props_obj = _slot(msg, _AT_MSG_PROPS, "properties")
        else:
            topic = msg.topic
            props_obj = msg.properties
        queue_id = place[1]
        hooks = always
        if cython.compiled and type(props_obj) is dict:
            props = cython.cast(dict, props_obj)
            for name in triggers:
                if name in props:
                    hooks = checks._hooks_for(props)
                    break
        else:
            for name in triggers:
                if name in props_obj:
                    hooks = checks._hooks_for(props_obj)
                    break
        refused = None
        try:
            for hook in hooks:
                refused = hook(msg)
                if refused is not None:  # the stored hooks hear of it in send order (_store_prepared)
                    break
        except Exception:  # a hook's bug: the hooks that ran before it still hear the outcome
            checks._stored(msg, SendResult(SendStatus.SYSTEM_ERROR, topic=topic, queue_id=queue_id,
                                           remark="put hook failed"))
            raise
        if refused is not None:
            prepared.append((msg, None, topic, queue_id, False, indexes[i], refused))
            continue
        try:
            if cython.compiled:
                enc = EncodedMessage.__new__(EncodedMessage)  # what EncodedMessage(msg) does, called directly
                if not enc._encode_common(msg):
                    enc._encode(msg)
            else:
                enc = EncodedMessage(msg)
        except ValueError as e:
            prepared.append((msg, None, topic, queue_id, False, indexes[i],
                             SendResult(SendStatus.MESSAGE_ILLEGAL, topic=topic, remark=str(e))))
            continue
        prepared.append((msg, enc, topic, queue_id, waits[i] and must_wait, indexes[i], None))


class SendChecks(SendHooks):
    """The send path's synchronous methods; the state they use is set up in ``Broker.__init__``."""

    def _check_many(self, items: list, checked: list, internal: bool) -> int:
        """`_check_known` of each (message, queue id) from ``len(checked)`` on,
        appended to ``checked``: (config, queue id) or a refusal. Stops at a
        topic not known yet (`SendPath.send_many` creates it, with an await)
        and returns where it stopped (``len(items)``: all checked). A
        (topic, queue id) met twice is checked once (a round-robin pick, no
        queue id, each time)."""
        n = len(items)
        i = len(checked)
        if not self.writable():  # once per call: it changes only across an await
            checked.extend([self._refuse_state(m.topic) for m, _ in items[i:]])
            return n
        check = self._check_topic
        seen: dict = {}
        last_topic = last_qid = last = None  # the previous message's: a run of one topic is looked up once
        while i < n:
            msg, qid = items[i]
            if qid is None or qid < 0:
                c = check(msg, qid, internal)
            else:
                topic = msg.topic
                if topic is last_topic and qid == last_qid:
                    c = last
                else:
                    key = (topic, qid)
                    c = seen.get(key)
                    if c is None:
                        c = check(msg, qid, internal)
                        if c.__class__ is tuple:
                            seen[key] = c
                    if c.__class__ is tuple:
                        last_topic, last_qid, last = topic, qid, c
            if c is None:
                return i
            checked.append(c)
            i += 1
        return n

    def _prepare(self, msg: Message, cfg: TopicConfig, queue_id: int) -> Prepared | SendResult:
        """`_prepare_many` of one message: a `SendResult` if refused before the
        put hooks, a `Prepared` (with ``refused`` set) after them."""
        results: list = [None]
        prepared: list = []
        self._prepare_many([(msg, queue_id)], [(cfg, queue_id)], results, prepared)
        return prepared[0] if prepared else results[0]

    def _prepare_many(self, items: list, checked: list, results: list, prepared: list) -> None:
        """Body checks, stamps, put hooks and encoding of each (message, queue
        id) ``checked`` passed, in send order: a message refused before the
        put hooks gets its result in ``results``; the others are appended to
        ``prepared`` (``index``: their place in ``results``; ``refused`` set
        when a hook or the encoding refused them). The whole batch is stamped
        before the first put hook (`_stamp_many`)."""
        config = self.config
        max_size = config.max_message_size
        check_all = config.reject_transaction_message  # else only an oversized body is refused here
        places: list[tuple[TopicConfig, int]] = []
        msgs: list[Message] = []
        indexes: list[int] = []
        i = 0
        for c in checked:
            if c.__class__ is SendResult:
                results[i] = c
            else:
                msg = items[i][0]
                bad = self._check_body(msg) if check_all or len(msg.body) > max_size else None
                if bad:
                    results[i] = bad
                else:
                    msgs.append(msg)
                    places.append(c)
                    indexes.append(i)
            i += 1
        if not msgs:
            return
        waits = self._stamp_many(msgs, places)
        _hooks_and_encoding(self, msgs, places, indexes, waits, prepared)

    def _store_prepared(self, prepared: list[Prepared], results: list) -> tuple[int, list[SendResult]]:
        """Append prepared messages together and fill in their results; returns
        (log end offset to be durable up to, results that wait for it)."""
        encs = [p[1] for p in prepared if p[1] is not None]
        status, rows, ts = self.store.append_many(encs) if encs else (_PUT_OK, [], 0)
        stored_hooks = self._stored_hooks
        hooked = len(stored_hooks) > 0
        waiting: list[SendResult] = []
        if status is not _PUT_OK:
            send_status, remark = _PUT_TO_SEND.get(status, (SendStatus.SYSTEM_ERROR, str(status)))
            if status is PutStatus.SERVICE_NOT_AVAILABLE:
                remark = self._not_available_remark(remark)
            for msg, enc, topic, queue_id, wait, index, refused in prepared:
                r = refused if refused is not None else SendResult(send_status, topic=topic, queue_id=queue_id,
                                                                   remark=remark)
                results[index] = r
                if hooked:
                    self._stored(msg, r)
            return 0, waiting
        if len(encs) < len(prepared):  # refused after the put hooks: no row of their own
            it = iter(rows)
            rows = [None if p[1] is None else next(it) for p in prepared]
        end = _results_and_stored_hooks(prepared, rows, ts, results, waiting, stored_hooks if hooked else None)
        if end > self._written:
            self._written = end
        return end, waiting

    def _not_available_remark(self, remark: str) -> str:
        """RocketMQ's SERVICE_NOT_AVAILABLE wording, with the disk's use when
        the store refused for space."""
        store = self.store
        if store.disk_full:
            return (f"service not available now. It may be caused by one of the following reasons: the broker's "
                    f"disk is full [{store.disk_usage_percent()}% used; {store.disk_full}], messages are put to "
                    f"the slave, message store has been shut down, etc.")
        return remark

    def _check_known(self, msg: Message, queue_id: int | None, internal: bool) -> tuple[TopicConfig, int] | SendResult | None:
        """``msgCheck`` for a topic that exists: broker state, topic permission,
        queue id. None when the topic is not known yet (`_check_send` creates it)."""
        if not self.writable():
            return self._refuse_state(msg.topic)
        return self._check_topic(msg, queue_id, internal)

    def writable(self) -> bool:
        """The broker takes sends now: running, a master, with write permission."""
        config = self.config
        return (self._running and config.broker_role is not BrokerRole.SLAVE and bool(config.broker_permission & PERM_WRITE)
                and not self.fenced)

    def _check_topic(self, msg: Message, queue_id: int | None, internal: bool) -> tuple[TopicConfig, int] | SendResult | None:
        """`_check_known` once the broker takes writes: topic permission and queue id."""
        topic = msg.topic
        cfg = self.topics.get(topic)
        if cfg is None:
            return None
        if not internal and topic in NOT_ALLOWED_SEND_TOPICS:
            return SendResult(SendStatus.NO_PERMISSION, topic=topic, remark=f"sending message to topic[{topic}] is forbidden")
        return self._pick_queue(cfg, topic, queue_id)

    def _refuse_state(self, topic: str) -> SendResult:
        if not self._running:
            return SendResult(SendStatus.SERVICE_NOT_AVAILABLE, topic=topic, remark="the broker is not running")
        if self.config.broker_role is BrokerRole.SLAVE:
            return SendResult(SendStatus.SERVICE_NOT_AVAILABLE, topic=topic, remark="the broker is a slave, it takes no sends")
        if self.fenced:
            return SendResult(SendStatus.SERVICE_NOT_AVAILABLE, topic=topic,
                              remark="the broker lost its master lease (fenced): it is becoming a slave")
        return SendResult(SendStatus.NO_PERMISSION, topic=topic,
                          remark=f"the broker[{self.config.broker_name}] sending message is forbidden")

    def _pick_queue(self, cfg: TopicConfig, topic: str, queue_id: int | None) -> tuple[TopicConfig, int] | SendResult:
        perm = cfg.perm
        if not perm & PERM_WRITE:
            return SendResult(SendStatus.NO_PERMISSION, topic=topic, remark=f"the topic[{topic}] sending message is forbidden")
        write_nums = cfg.write_queue_nums
        if queue_id is None or queue_id < 0:
            if write_nums <= 0:
                return SendResult(SendStatus.NO_PERMISSION, topic=topic, remark=f"topic[{topic}] has no write queue")
            n = self._round_robin.get(topic, -1) + 1
            self._round_robin[topic] = n
            return cfg, n % write_nums
        if queue_id >= write_nums and queue_id >= cfg.read_queue_nums:
            return SendResult(SendStatus.SYSTEM_ERROR, topic=topic,
                              remark=f"request queueId[{queue_id}] is illegal, topic {topic} has {cfg.queue_nums} queues")
        return cfg, queue_id

    def _check_body(self, msg: Message) -> SendResult | None:
        if len(msg.body) > self.config.max_message_size:
            return SendResult(SendStatus.MESSAGE_ILLEGAL, topic=msg.topic,
                              remark=f"message body is {len(msg.body)} bytes, more than maxMessageSize {self.config.max_message_size}")
        if msg.properties.get(PROPERTY_TRAN_MSG) == "true" and self.config.reject_transaction_message:
            return SendResult(SendStatus.NO_PERMISSION, topic=msg.topic,
                              remark=f"the broker[{self.config.broker_name}] sending transaction message is forbidden")
        return None

    def _stamp_many(self, msgs: list[Message], places: list[tuple[TopicConfig, int]]) -> list[bool]:
        """Broker-side fields of each message (``places``: its (config, queue
        id)); returns whether each sender waits for the store (WAIT). One clock
        read and one `UniqKeyGenerator.next_many` for the batch; each message's
        properties change in the same order as one by one (CLUSTER, then
        UNIQ_KEY), so the stored bytes are the same."""
        waits: list[bool] = []
        keyless: list[dict] = []
        _stamp_each(msgs, places, self.config.broker_cluster_name, self.store_host, waits, keyless)
        if keyless:
            keys = self._uniq.next_many(len(keyless))
            for i in range(len(keyless)):
                keyless[i][PROPERTY_UNIQ_KEY] = keys[i]
        return waits

    def _send_result(self, put, encoded: list[EncodedMessage], topic: str, queue_id: int) -> SendResult:
        if put.status is _PUT_OK:  # identity first: hashing an Enum member is a Python-level call
            status, remark = SendStatus.SEND_OK, ""
        else:
            mapped = _PUT_TO_SEND.get(put.status)
            status, remark = mapped if mapped is not None else (SendStatus.SYSTEM_ERROR, str(put.status))
            if put.status is PutStatus.SERVICE_NOT_AVAILABLE:
                remark = self._not_available_remark(remark)
            if status not in _STORED:
                return SendResult(status, topic=topic, queue_id=queue_id, remark=remark)
        if len(encoded) == 1:
            uniq_key = encoded[0].uniq_key or None
        else:
            uniq_key = ",".join([e.uniq_key for e in encoded if e.uniq_key]) or None
        return SendResult(status, topic, queue_id, put.queue_offset, uniq_key, put.physical_offset,
                          put.store_timestamp, put.msg_num, remark, put)
