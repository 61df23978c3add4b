"""RegisterBrokerBody (REGISTER_BROKER 103 body), plain JSON and compressed.

Reference 3.3. Plain form::

    {"filterServerList":[],"topicConfigSerializeWrapper":
        {"dataVersion":{"counter":N,"timestamp":T},"topicConfigTable":{"T":{TopicConfig}}}}

Compressed form (header ``compressed=true``): zlib deflate of
``int32 len + DataVersion JSON``, ``int32 topic count``, per topic
``int32 len + "name read write perm filterType"`` (space separated, the
5-field ``TopicConfig.encode``), then ``int32 len + filterServerList JSON``.

Invariants: `decode_register_body` accepts exactly what `encode_register_body`
writes in either form, and raises `RegisterBodyError` (never another
exception type) for anything it cannot read.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

from core.namesrv.route_table import DataVersion, TopicConfig
from core.remoting import decode_json, encode_json


def _dumps(obj) -> bytes:
    return encode_json(obj, standard=False).encode()


class RegisterBodyError(ValueError):
    """The body of a REGISTER_BROKER request cannot be read."""


@dataclass(slots=True)
class RegisterBrokerBody:
    data_version: DataVersion = field(default_factory=DataVersion)
    topic_configs: dict[str, TopicConfig] = field(default_factory=dict)
    filter_servers: list[str] = field(default_factory=list)


def body_crc32(body: bytes) -> int:
    """``UtilAll.crc32``: CRC32 masked to a non-negative Java int."""
    return zlib.crc32(body) & 0x7FFFFFFF


def encode_register_body(body: RegisterBrokerBody, *, compressed: bool = False) -> bytes:
    if not compressed:
        return _dumps(
            {
                "filterServerList": body.filter_servers,
                "topicConfigSerializeWrapper": {
                    "dataVersion": body.data_version.to_json(),
                    "topicConfigTable": {n: tc.to_json() for n, tc in body.topic_configs.items()},
                },
            }
        )
    parts = []
    dv = _dumps(body.data_version.to_json())
    parts.append(struct.pack(">i", len(dv)) + dv)
    parts.append(struct.pack(">i", len(body.topic_configs)))
    for tc in body.topic_configs.values():
        line = f"{tc.topic_name} {tc.read_queue_nums} {tc.write_queue_nums} {tc.perm} {tc.topic_filter_type}".encode()
        parts.append(struct.pack(">i", len(line)) + line)
    fs = _dumps(body.filter_servers)
    parts.append(struct.pack(">i", len(fs)) + fs)
    return zlib.compress(b"".join(parts), 9)


def decode_register_body(data: bytes, *, compressed: bool) -> RegisterBrokerBody:
    try:
        return _decode_compressed(data) if compressed else _decode_json(data)
    except RegisterBodyError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, struct.error, zlib.error) as exc:
        raise RegisterBodyError(f"bad register body: {exc}") from exc


def _decode_json(data: bytes) -> RegisterBrokerBody:
    if not data:
        return RegisterBrokerBody()
    doc = decode_json(data)
    if not isinstance(doc, dict):
        raise RegisterBodyError("register body is not a JSON object")
    wrapper = doc.get("topicConfigSerializeWrapper") or {}
    table = wrapper.get("topicConfigTable") or {}
    return RegisterBrokerBody(
        data_version=DataVersion.from_json(wrapper.get("dataVersion")),
        topic_configs={str(n): TopicConfig.from_json(str(n), tc) for n, tc in table.items()},
        filter_servers=[str(s) for s in doc.get("filterServerList") or []],
    )


def _decode_compressed(data: bytes) -> RegisterBrokerBody:
    raw = zlib.decompress(data)
    pos = 0

    def take(n: int) -> bytes:
        nonlocal pos
        if n < 0 or pos + n > len(raw):
            raise RegisterBodyError("compressed register body is truncated")
        out = raw[pos : pos + n]
        pos += n
        return out

    def take_int() -> int:
        return struct.unpack(">i", take(4))[0]

    dv = DataVersion.from_json(decode_json(take(take_int())))
    configs = {}
    for _ in range(take_int()):
        fields = take(take_int()).decode().split(" ")
        if len(fields) != 5:
            raise RegisterBodyError(f"topic config line has {len(fields)} fields, not 5")
        name, r, w, perm, ftype = fields
        configs[name] = TopicConfig(name, int(r), int(w), int(perm), ftype)
    fs = decode_json(take(take_int())) or []
    return RegisterBrokerBody(dv, configs, [str(s) for s in fs])
