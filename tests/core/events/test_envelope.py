"""CloudEvents in and out (core.events.envelope): the three HTTP modes, invalid events, MQTT publishes."""

import json

import pytest

from core.events.envelope import MAX_BATCH, EventError, event_from_mqtt, events_from_http, to_http
from core.events.transform import compile_transform

GOOD = {"specversion": "1.0", "id": "e1", "source": "s", "type": "t", "subject": "a/b", "data": {"x": 1}}


def test_structured_binary_and_batch():
    [e] = events_from_http({"Content-Type": "application/cloudevents+json"}, json.dumps(GOOD).encode())
    assert (e["id"], e["data"]) == ("e1", {"x": 1})
    [b] = events_from_http({"ce-specversion": "1.0", "ce-id": "e2", "ce-source": "s", "ce-type": "t",
                            "content-type": "application/json"}, b'{"x": 2}')
    assert (b["id"], b["data"], b["datacontenttype"]) == ("e2", {"x": 2}, "application/json")
    batch = events_from_http({"content-type": "application/cloudevents-batch+json"},
                             json.dumps([GOOD, {**GOOD, "id": "e3"}]).encode())
    assert [x["id"] for x in batch] == ["e1", "e3"]


def test_what_a_producer_may_leave_out_is_filled():
    [e] = events_from_http({}, b'{"source": "s", "type": "t"}')
    assert e["specversion"] == "1.0" and e["id"] and e["time"]


@pytest.mark.parametrize("headers,body,message", [
    ({}, b"{not json", "the body is not JSON"),
    ({}, b"[]", "a batch is a non-empty JSON array"),
    ({}, json.dumps([GOOD] * (MAX_BATCH + 1)).encode(), f"a batch holds at most {MAX_BATCH} events"),
    ({}, b'"text"', "event 0: a structured event is a JSON object"),
    ({}, json.dumps([GOOD, 3]).encode(), "event 1: a structured event is a JSON object"),
    ({}, json.dumps({**GOOD, "source": ""}).encode(), "event 0: source:"),
    ({}, json.dumps({**GOOD, "specversion": "0.3"}).encode(), "event 0: specversion '0.3' is not 1.0"),
    ({"ce-specversion": "1.0", "ce-id": "x", "ce-source": "s"}, b"", "event 0 (binary mode): type:"),
])
def test_an_invalid_request_names_the_event_and_the_reason(headers, body, message):
    with pytest.raises(EventError) as e:
        events_from_http(headers, body)
    assert str(e.value).startswith(message), str(e.value)


@pytest.mark.parametrize("payload,data,ctype", [
    (b'{"temp": 31}', {"temp": 31}, "application/json"),
    (b"on", "on", "text/plain"),
    (b"\xff\x00", None, "application/octet-stream"),
])
def test_an_mqtt_publish_becomes_an_event(payload, data, ctype):
    e = event_from_mqtt("telemetry", "mqgate.mqtt.publish", "devices/d1/t", payload, "MSGID")
    assert (e["source"], e["subject"], e["id"], e["datacontenttype"]) == ("telemetry", "devices/d1/t", "MSGID", ctype)
    assert e.get("data") == data
    assert ("data_base64" in e) == (data is None)


def test_webhook_bodies_in_both_modes():
    headers, body = to_http(GOOD, compile_transform(None).apply(GOOD), "binary")
    assert headers["ce-id"] == "e1" and json.loads(body) == {"x": 1}
    headers, body = to_http(GOOD, compile_transform(None).apply(GOOD), "structured")
    assert headers["content-type"] == "application/cloudevents+json" and json.loads(body)["data"] == {"x": 1}
    t = compile_transform({"form": "JSONPATH", "value": "$.data.x"})
    headers, body = to_http(GOOD, t.apply(GOOD), "binary")
    assert (headers["content-type"], body) == ("application/json", b"1")
