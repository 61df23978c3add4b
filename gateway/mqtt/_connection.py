"""``MQTTConnection``: the server side of one MQTT network connection, sans I/O.

Rules kept here:

* Bytes in (``receive_data``), events out (``next_event`` / ``events``),
  events in (``send``), bytes out. No sockets, no clock, no threads.
* The first packet must be CONNECT. Its protocol level (3, 4 or 5) fixes the
  version for every packet decoded or encoded after it.
* Every complete packet is decoded in arrival order; ``events()`` returns
  all of them, so the caller can act on a whole read and write once. With
  ``ack_words``, a run of plain client acks (PUBACK, PUBREC, PUBCOMP of 4
  bytes: success, no properties) is one ``ClientAcks`` in their place, in
  arrival order; any other ack is an event, as without it.
* Input larger than ``max_packet_size`` (the server's Maximum Packet Size:
  the constructor default, or the value sent in CONNACK) is rejected as
  soon as its fixed header is read, before the body is buffered.
* Output larger than the client's Maximum Packet Size (5.0 CONNECT) is not
  produced: for acks the Reason String and User Properties are dropped
  first (5.0 section 3.4.2.2.2); otherwise ``PacketTooLarge`` is raised and
  the state is unchanged, so the caller drops the packet.
* A 5.0 client that sent Request Problem Information 0 gets no Reason
  String or User Properties on any packet but PUBLISH, CONNACK and
  DISCONNECT (5.0 [MQTT-3.1.2-29]): ``send`` drops them from the others.
* Inbound topic aliases are resolved here: every ``Publish`` handed out has
  its full topic and ``topic_alias=None``. The limit is the Topic Alias
  Maximum the server sends in CONNACK (the constructor default until then).
* After a ``RemoteProtocolError`` the connection is dead: the same error is
  raised again on every read, and ``error_response(exc)`` gives the bytes
  to send before closing (it moves the state to CLOSED).
* Once CLOSED, received data is ignored; EOF yields one ``ConnectionClosed``.
* Enhanced authentication (5.0 section 4.12) takes turns: a CONNECT with
  an Authentication Method, or a client AUTH 0x19 (re-authenticate, only
  after CONNACK and not during another exchange), gives the server the
  turn; a server AUTH 0x18 gives it to the client, whose only legal answer
  is AUTH 0x18; the server ends the exchange with CONNACK or AUTH 0x00
  (re-authentication). A client AUTH out of turn, or with another reason
  code, is a protocol error; so is a server AUTH out of turn (local).
* Nothing is held that an idle connection does not need: of the CONNECT
  only its Authentication Method and Session Expiry Interval are kept (not
  its password or will), and input fully decoded leaves no buffer.
"""

from __future__ import annotations

from dataclasses import replace

try:
    import cython
except ImportError:  # a pure-Python install: nothing here is compiled
    from . import _cython_shadow as cython

from ._decode import decode_packet, decode_publish, peek_connect_version, read_fixed_header
from ._encode import encode
from ._events import (Auth, ClientAcks, ConnAck, ConnectionClosed, Connect, Disconnect, PubAck, PubComp, PubRec, PubRel,
                      Publish, _trusted)
from ._reasons import (
    ALLOWED_REASONS,
    LocalProtocolError,
    PacketTooLarge,
    ProtocolError,
    ReasonCode,
    RemoteProtocolError,
    connack_return_code,
)
from ._state import NO_EXCHANGE, RECEIVE, SEND, SERVER_TURN, ConnectionState, auth_received, auth_sent, send_key
from ._topic_alias import NO_OUTBOUND_ALIASES, InboundTopicAliases, OutboundTopicAliases
from ._wire import PacketType

S = ConnectionState
_PROTO = ReasonCode.PROTOCOL_ERROR
UNLIMITED = 268_435_460  # 1 + 4 + the largest remaining length
_PROBLEM_INFO_ALWAYS = (Publish, ConnAck, Disconnect)
_PLAIN_ACKS = {0x40: PubAck, 0x50: PubRec, 0x62: PubRel, 0x70: PubComp}  # an ack's first byte -> its event
_WORD_OF_ACK = {PubAck: 0, PubRec: 1 << 16, PubComp: 3 << 16}  # a client ack's word type (gateway.mqtt.qos)


class _Sentinel:
    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


NEED_DATA = _Sentinel("NEED_DATA")


class MQTTConnection:
    """Server role. See the module docstring for the rules (``ack_words`` too).

    ``max_packet_size`` and ``topic_alias_maximum`` are the server's limits
    until the CONNACK is sent. A 5.0 CONNACK then sets them: its Topic Alias
    Maximum (absent = 0) and, if present, its Maximum Packet Size. So a 5.0
    server should announce ``maximum_packet_size`` and ``topic_alias_maximum``
    in its ``ConnAck``. For 3.1/3.1.1 the constructor values hold throughout.
    """

    __slots__ = ("state", "max_packet_size", "protocol_version", "peer_max_packet_size", "peer_receive_maximum",
                 "peer_topic_alias_maximum", "inbound_aliases", "outbound_aliases", "_buf", "_pos", "_pending",
                 "_pending_len", "_need", "_eof", "_closed_reported", "_disconnected", "_error", "_claimed_version",
                 "_no_problem_info", "_auth_method", "_auth_turn", "_connect_expiry", "_ack_words")

    def __init__(self, *, max_packet_size: int = UNLIMITED, topic_alias_maximum: int = 0,
                 ack_words: bool = False) -> None:
        self.state = S.AWAIT_CONNECT
        self._ack_words = ack_words  # runs of plain client acks as ClientAcks (module docstring)
        self.max_packet_size = max_packet_size
        self.protocol_version: int | None = None
        self.peer_max_packet_size: int | None = None
        self.peer_receive_maximum = 65535
        self.peer_topic_alias_maximum = 0
        self.inbound_aliases = InboundTopicAliases(topic_alias_maximum)
        self.outbound_aliases = NO_OUTBOUND_ALIASES
        # What is kept of the CONNECT (not the packet: its password and will
        # are the server's business, and an idle connection would hold them).
        self._auth_method: str | None = None
        self._auth_turn = NO_EXCHANGE
        self._connect_expiry = 0  # its Session Expiry Interval (5.0)
        self._buf = b""
        self._pos = 0
        self._pending: list[bytes] | None = None  # reads not yet joined into _buf
        self._pending_len = 0
        self._need = 0
        self._eof = False
        self._closed_reported = False
        self._disconnected = False
        self._error: RemoteProtocolError | None = None
        self._claimed_version: int | None = None
        self._no_problem_info = False  # 5.0 CONNECT said Request Problem Information 0

    # ---- input -----------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Feed bytes read from the peer; ``b""`` means EOF."""
        if self._eof:
            raise LocalProtocolError("receive_data after EOF")
        if not data:
            self._eof = True
        elif self.state is not S.CLOSED:
            if self._pending is None:
                self._pending = [bytes(data)]
            else:
                self._pending.append(bytes(data))
            self._pending_len += len(data)

    def _fill(self) -> None:
        pending = self._pending
        if self._pos == len(self._buf) and len(pending) == 1:
            self._buf = pending[0]
        else:
            self._buf = b"".join([self._buf[self._pos :], *pending])
        self._pos = 0
        self._pending = None
        self._pending_len = 0

    def next_event(self):
        """The next event, ``NEED_DATA``, or (once, at EOF) ``ConnectionClosed``."""
        if self._error is not None:
            raise self._error
        try:
            return self._next_event()
        except RemoteProtocolError as exc:
            self._error = exc
            raise

    def events(self) -> list:
        """Every event complete in the buffer, in order.

        If a protocol error follows some good packets, those events are
        returned first and the error is raised by the next call.
        """
        out = []
        try:
            while True:
                if self.state is S.CONNECTED and self._error is None:
                    self._publishes(out)
                event = self.next_event()
                if event is NEED_DATA:
                    return out
                out.append(event)
        except RemoteProtocolError:
            if out:
                return out
            raise

    @cython.locals(buf=bytes, pos=cython.Py_ssize_t, start=cython.Py_ssize_t, end=cython.Py_ssize_t,
                   limit=cython.Py_ssize_t, first=cython.long, length=cython.Py_ssize_t, more=cython.long,
                   body=cython.Py_ssize_t, stop=cython.Py_ssize_t)
    def _publishes(self, out: list) -> None:
        """Decode the PUBLISH packets and plain acks at the front of the buffer into ``out``.

        The common case of ``_next_event`` done in one loop for a connected
        client: a PUBLISH with a 1- or 2-byte remaining length, whole in the
        buffer and within ``max_packet_size``, or an ack of 4 bytes (valid as
        read: built unchecked), keeps the state CONNECTED. It stops at anything
        else (another type, a longer or malformed length, an incomplete
        packet), which ``_next_event`` then handles as before. (Compiled, its
        positions and lengths are C ints.)"""
        if self._pending and self._pending_len >= self._need - (len(self._buf) - self._pos):
            self._fill()
        buf = self._buf
        pos = start = self._pos
        end = len(buf)
        version = self.protocol_version
        limit = self.max_packet_size
        words = None  # the ClientAcks run at the end of ``out`` (ack_words), if any
        try:
            while end - pos >= 2:
                first = buf[pos]
                if first >> 4 != 3:  # PacketType.PUBLISH
                    cls = _PLAIN_ACKS.get(first)  # a plain ack: no reason code, no properties, id > 0
                    if (cls is None or buf[pos + 1] != 2 or end - pos < 4 or limit < 4
                            or not buf[pos + 2] | buf[pos + 3]):
                        break
                    pos += 4
                    if cls is not PubRel and self._ack_words:
                        if words is None:
                            words = []
                            out.append(_trusted(ClientAcks, {"words": words}))
                        words.append(_WORD_OF_ACK[cls] | buf[pos - 2] << 8 | buf[pos - 1])
                        continue
                    words = None
                    out.append(_trusted(cls, {"packet_id": buf[pos - 2] << 8 | buf[pos - 1]}))
                    continue
                words = None
                length = buf[pos + 1]
                body = pos + 2
                if length >= 128:
                    if end - pos < 3:
                        break
                    more = buf[pos + 2]
                    if more >= 128 or not more:
                        break
                    length = (length & 0x7F) | (more << 7)
                    body = pos + 3
                stop = body + length
                if stop > end or stop - pos > limit:
                    break
                event = decode_publish(first & 0x0F, buf, body, stop, version)
                pos = stop
                if version == 5:
                    self._pos = pos  # as _next_event: the packet is consumed even if its alias is bad
                    event = self._resolve_alias(event)
                out.append(event)
        except RemoteProtocolError as exc:
            self._error = exc
            raise
        finally:
            if pos != start:
                self._pos = pos
                self._need = 0

    def _next_event(self):
        if self._pending and self._pending_len >= self._need - (len(self._buf) - self._pos):
            self._fill()
        buf, pos = self._buf, self._pos
        end = len(buf)
        header = read_fixed_header(buf, pos, end) if self.state is not S.CLOSED else None
        if header is None:
            self._need = end - pos + 1
            return self._at_end()
        first, length, body = header
        stop = body + length
        if stop - pos > self.max_packet_size:
            raise RemoteProtocolError(f"packet of {stop - pos} bytes is too large", ReasonCode.PACKET_TOO_LARGE)
        if stop > end:
            self._need = stop - pos
            return self._at_end()
        self._need = 0
        if self.state is S.AWAIT_CONNECT:
            if first >> 4 != PacketType.CONNECT:
                raise RemoteProtocolError("the first packet must be CONNECT", _PROTO)
            self._claimed_version = peek_connect_version(buf, body, stop)
            event = decode_packet(first, buf, body, stop, 5)
        else:
            event = decode_packet(first, buf, body, stop, self.protocol_version)
        self._pos = stop
        return self._received(event)

    def _at_end(self):
        if self._pos == len(self._buf) and self._buf:
            # All consumed: drop the read's bytes (an idle connection keeps no buffer).
            self._buf = b""
            self._pos = 0
        if not self._eof or self._closed_reported:
            return NEED_DATA
        self._closed_reported = True
        self.state = S.CLOSED
        return ConnectionClosed(clean=self._disconnected)

    def _received(self, event):
        cls = type(event)
        new_state = RECEIVE.get((self.state, cls))
        if new_state is None:
            raise RemoteProtocolError(f"{cls.__name__} is not allowed in state {self.state.name}", _PROTO)
        if cls is Publish:
            if self.protocol_version == 5:
                event = self._resolve_alias(event)
        elif cls is Connect:
            self._accept_connect(event)
        elif cls is Auth:
            if self._auth_method is None:
                raise RemoteProtocolError("AUTH without an authentication method in CONNECT", _PROTO)
            method = event.authentication_method
            if method is not None and method != self._auth_method:
                raise RemoteProtocolError("AUTH with a different authentication method", _PROTO)
            self._auth_turn = auth_received(self._auth_turn, event.reason_code, self.state is S.CONNECTED)
        elif cls is Disconnect:
            if event.session_expiry_interval and not self._connect_expiry:
                raise RemoteProtocolError("DISCONNECT sets a session expiry after CONNECT said 0", _PROTO)
            self._disconnected = True
        if (
            self.state is S.CONNECTING
            and self._auth_method is not None
            and cls not in (Auth, Disconnect)
        ):
            raise RemoteProtocolError(f"{cls.__name__} before CONNACK during enhanced authentication", _PROTO)
        self.state = new_state
        return event

    def _resolve_alias(self, event):
        if event.subscription_identifiers:
            raise RemoteProtocolError("a client PUBLISH may not carry subscription identifiers", _PROTO)
        alias = event.topic_alias
        if alias is None:
            return event
        fields = dict(event.__dict__)
        fields["topic"] = self.inbound_aliases.resolve(event.topic, alias)
        fields["topic_alias"] = None
        return _trusted(Publish, fields)

    def _accept_connect(self, event: Connect) -> None:
        self.protocol_version = event.protocol_version
        self._auth_method = event.authentication_method
        if self._auth_method is not None:
            self._auth_turn = SERVER_TURN
        self._connect_expiry = event.session_expiry_interval or 0
        if event.protocol_version == 5:
            self.peer_max_packet_size = event.maximum_packet_size
            self.peer_receive_maximum = event.receive_maximum or 65535
            self.peer_topic_alias_maximum = event.topic_alias_maximum or 0
            self.outbound_aliases = OutboundTopicAliases(self.peer_topic_alias_maximum)
            self._no_problem_info = event.request_problem_information == 0

    @property
    def authentication_method(self) -> str | None:
        """The CONNECT's Authentication Method (5.0 enhanced authentication)."""
        return self._auth_method

    # ---- output ----------------------------------------------------------

    def send(self, event) -> bytes:
        """The bytes for ``event``; ``b""`` when the version has no such packet.

        Raises ``LocalProtocolError`` if the event is illegal now, and
        ``PacketTooLarge`` if it exceeds the client's Maximum Packet Size.
        """
        new_state = SEND.get((self.state, send_key(event)))
        if new_state is None:
            raise LocalProtocolError(f"cannot send {type(event).__name__} in state {self.state.name}")
        version = self.protocol_version
        cls = type(event)
        if cls is Publish:
            if event.topic_alias is not None and event.topic_alias > self.peer_topic_alias_maximum:
                raise LocalProtocolError(f"topic alias {event.topic_alias} above the client's maximum")
        elif cls is Disconnect:
            if event.session_expiry_interval is not None:
                raise LocalProtocolError("the server must not send a session expiry in DISCONNECT")
            if version < 5:
                self.state = new_state  # 3.1.1: the server just closes
                return b""
        elif cls is Auth:
            if version < 5:
                raise LocalProtocolError("AUTH exists only in MQTT 5")
            self._auth_turn = auth_sent(self._auth_turn, event.reason_code, self.state is S.CONNECTED)
        if (self._no_problem_info and cls not in _PROBLEM_INFO_ALWAYS
                and (getattr(event, "reason_string", None) is not None or getattr(event, "user_properties", ()))):
            event = replace(event, reason_string=None, user_properties=())
        data = encode(event, version)
        limit = self.peer_max_packet_size
        if limit is not None and len(data) > limit:
            data = self._shrink(event, data, limit)
        if cls is ConnAck and version == 5:
            self._apply_connack(event)
        self.state = new_state
        return data

    def _shrink(self, event, data: bytes, limit: int) -> bytes:
        if type(event) is Publish:
            if event.topic and event.topic_alias is not None:
                self.outbound_aliases.forget(event.topic)
            raise PacketTooLarge(len(data), limit)
        if hasattr(event, "reason_string"):
            data = encode(replace(event, reason_string=None, user_properties=()), self.protocol_version)
        if len(data) > limit:
            raise PacketTooLarge(len(data), limit)
        return data

    def _apply_connack(self, event: ConnAck) -> None:
        self._auth_turn = NO_EXCHANGE  # (3.1.1 has no enhanced authentication)
        # Absent means 0: the client may use no aliases (5.0 section 3.2.2.3.8).
        self.inbound_aliases.maximum = event.topic_alias_maximum or 0
        if event.maximum_packet_size is not None:
            self.max_packet_size = event.maximum_packet_size

    def send_encoded_publish(self, data: bytes) -> bytes:
        """Check a pre-encoded PUBLISH (see ``PublishTemplate``) may be sent; return it."""
        if self.state is not S.CONNECTED:
            raise LocalProtocolError(f"cannot send PUBLISH in state {self.state.name}")
        limit = self.peer_max_packet_size
        if limit is not None and len(data) > limit:
            raise PacketTooLarge(len(data), limit)
        return data

    def with_topic_alias(self, publish: Publish) -> Publish:
        """``publish`` rewritten to use an outbound topic alias when allowed."""
        if self.protocol_version != 5:
            return publish
        return self.outbound_aliases.apply(publish)

    def error_response(self, exc: ProtocolError) -> bytes:
        """Bytes to send before closing after ``exc``; the state becomes CLOSED.

        Before CONNACK: a 5.0 CONNACK with the reason code, or for 3.1/3.1.1
        a CONNACK only for an unacceptable protocol level (0x01) or client
        identifier (0x02). After CONNACK: a 5.0 DISCONNECT with the reason
        code; nothing for 3.1/3.1.1 (the spec says just close).
        """
        state = self.state
        self.state = S.CLOSED
        if self._error is None and isinstance(exc, RemoteProtocolError):
            self._error = exc
        version = self.protocol_version or self._claimed_version
        code = exc.reason_code
        if state in (S.AWAIT_CONNECT, S.CONNECTING):
            if version == 5:
                if code not in ALLOWED_REASONS[PacketType.CONNACK]:
                    code = _PROTO
                return encode(ConnAck(reason_code=code), 5)
            if version is not None and code in (
                ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
                ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
            ):
                return bytes((0x20, 2, 0, connack_return_code(code)))
            return b""
        if state is S.CONNECTED and version == 5:
            if code not in ALLOWED_REASONS[PacketType.DISCONNECT]:
                code = _PROTO
            return encode(Disconnect(reason_code=code), 5)
        return b""
