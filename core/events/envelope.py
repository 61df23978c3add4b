"""CloudEvents 1.0 in and out: HTTP requests to events, events to stored bytes, events to HTTP targets.

An event inside mqgate is the dict of its JSON structured form
(``{"specversion": "1.0", "id": ..., "source": ..., "type": ..., "data": ...}``):
that is what is stored on the bus topic (content type
``application/cloudevents+json``), what patterns match and what JSONPath
reads. The `cloudevents` SDK parses what arrives over HTTP (structured,
binary, and batches) and writes what the webhook targets send.

Rules kept here:
- `events_from_http` checks every event of a request before returning any:
  one bad event is an `EventError` naming its index and reason, and the
  caller stores nothing of that request.
- The SDK fills what CloudEvents lets a producer leave out (``id``: a
  UUID, ``time``: now, ``specversion``: 1.0); ``source`` and ``type`` are
  required.
- Binary data (``data_base64``) is kept as such; patterns and JSONPath see
  no ``data`` then.
- `event_from_mqtt`: source = the source's name, subject = the MQTT topic,
  id = the stored message's id (a redelivered publish keeps its id), data =
  the payload decoded as JSON when it is JSON, else text when it is UTF-8,
  else bytes.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from cloudevents.core.bindings import http as ce_http
from cloudevents.core.exceptions import BaseCloudEventException
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

from .transform import Payload

__all__ = ["EventError", "decode_event", "encode_event", "event_from_mqtt", "events_from_http", "to_http",
           "MAX_BATCH"]

STRUCTURED = "application/cloudevents+json"
BATCH = "application/cloudevents-batch+json"
MAX_BATCH = 1000
_FORMAT = JSONFormat()


class EventError(ValueError):
    """An event that is not a valid CloudEvent: one line naming it."""


def _reason(e: Exception) -> str:
    if isinstance(e, BaseCloudEventException) and hasattr(e, "errors"):
        parts = []
        for attr, errs in getattr(e, "errors").items():
            parts.append(f"{attr}: {errs[0]}")
        return ", ".join(parts) or str(e)
    return " ".join(str(e).split()) or type(e).__name__


def _as_dict(event: CloudEvent) -> dict:
    return json.loads(_FORMAT.write(event))


def _checked(event: CloudEvent, where: str) -> dict:
    d = _as_dict(event)
    for attr in ("source", "type", "id"):
        if not isinstance(d.get(attr), str) or not d[attr]:
            raise EventError(f"{where}: attribute {attr} is required (a non-empty string)")
    if d.get("specversion") != "1.0":
        raise EventError(f"{where}: specversion {d.get('specversion')!r} is not 1.0")
    return d


def _structured(obj: Any, where: str) -> dict:
    if not isinstance(obj, dict):
        raise EventError(f"{where}: a structured event is a JSON object")
    try:
        return _checked(_FORMAT.read(None, json.dumps(obj)), where)
    except EventError:
        raise
    except Exception as e:  # noqa: BLE001 - the SDK raises several kinds; the client gets one line
        raise EventError(f"{where}: {_reason(e)}") from None


def events_from_http(headers: dict[str, str], body: bytes) -> list[dict]:
    """The events of one PutEvents request (binary, structured or batch), all checked."""
    headers = {k.lower(): v for k, v in headers.items()}
    ctype = headers.get("content-type", "").split(";")[0].strip().lower()
    if any(k.startswith("ce-") for k in headers):
        try:
            event = ce_http.from_binary(ce_http.HTTPMessage(headers, body), _FORMAT, None)
        except Exception as e:  # noqa: BLE001
            raise EventError(f"event 0 (binary mode): {_reason(e)}") from None
        return [_checked(event, "event 0 (binary mode)")]
    try:
        parsed = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError) as e:
        raise EventError(f"the body is not JSON ({e}); send {STRUCTURED}, {BATCH}, or ce- headers "
                         f"(binary mode)") from None
    if ctype == BATCH or isinstance(parsed, list):
        if not isinstance(parsed, list) or not parsed:
            raise EventError("a batch is a non-empty JSON array of structured events")
        if len(parsed) > MAX_BATCH:
            raise EventError(f"a batch holds at most {MAX_BATCH} events, not {len(parsed)}")
        return [_structured(obj, f"event {i}") for i, obj in enumerate(parsed)]
    return [_structured(parsed, "event 0")]


def encode_event(event: dict) -> bytes:
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode()


def decode_event(body: bytes) -> dict | None:
    """The stored event, or None when the body is no JSON object (a native send of something else)."""
    try:
        event = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return event if isinstance(event, dict) else None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def event_from_mqtt(source: str, event_type: str, topic: str, payload: bytes, msg_id: str,
                    time: str | None = None) -> dict:
    event = {"specversion": "1.0", "id": msg_id, "source": source, "type": event_type, "subject": topic,
             "time": time or _now()}
    try:
        event["data"] = json.loads(payload)
        event["datacontenttype"] = "application/json"
        return event
    except (ValueError, UnicodeDecodeError):
        pass
    try:
        event["data"] = payload.decode("utf-8")
        event["datacontenttype"] = "text/plain"
    except UnicodeDecodeError:
        import base64

        event["data_base64"] = base64.b64encode(payload).decode()
        event["datacontenttype"] = "application/octet-stream"
    return event


def wrapped(event: dict, payload: Payload) -> dict:
    """The event a target sends: ``event`` itself, or its attributes with the transformed data."""
    if payload.original:
        return event
    out = {k: v for k, v in event.items() if k not in ("data", "data_base64")}
    out["datacontenttype"] = payload.content_type
    if payload.content_type == "application/json":
        out["data"] = json.loads(payload.body)
    else:
        out["data"] = payload.body.decode("utf-8", "replace")
    return out


def body_of(event: dict, payload: Payload) -> bytes:
    """The bytes an MQTT or topic target sends: the whole event (original form) or the transformed body."""
    return encode_event(event) if payload.original else payload.body


def to_http(event: dict, payload: Payload, mode: str) -> tuple[dict[str, str], bytes]:
    """Headers and body of a webhook POST, through the SDK's HTTP binding."""
    out = wrapped(event, payload)
    ce = _FORMAT.read(None, encode_event(out))
    data = ce.get_data()
    if isinstance(data, (list, int, float, bool)) and mode == "binary":
        # the SDK's binary writer takes dicts, text and bytes; JSON arrays and scalars go as their JSON text
        ce = CloudEvent(dict(ce.get_attributes()), json.dumps(data).encode())
    msg = ce_http.to_binary(ce, _FORMAT) if mode == "binary" else ce_http.to_structured(ce, _FORMAT)
    return dict(msg.headers), msg.body
