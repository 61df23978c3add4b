"""Transforms: complete event, JSONPath part, constant, template (core.events.transform)."""

import json

import pytest

from core.events.transform import TransformError, compile_transform

EVENT = {"specversion": "1.0", "id": "e1", "source": "devices", "type": "telemetry", "subject": "a/dev-7",
         "data": {"temp": 31.5, "name": "dev-7", "tags": ["hot", "indoor"], "site": {"building": "A"}}}

CASES = [
    ("default is the original", None, None, None),
    ("ORIGINAL", {"form": "ORIGINAL"}, None, None),
    ("JSONPATH number", {"form": "JSONPATH", "value": "$.data.temp"}, b"31.5", "application/json"),
    ("JSONPATH object", {"form": "JSONPATH", "value": "$.data.site"}, b'{"building":"A"}', "application/json"),
    ("JSONPATH string", {"form": "JSONPATH", "value": "$.subject"}, b"a/dev-7", "text/plain"),
    ("JSONPATH several", {"form": "JSONPATH", "value": "$.data.tags[*]"}, b'["hot","indoor"]', "application/json"),
    ("JSONPATH nothing", {"form": "JSONPATH", "value": "$.data.nope"}, b"null", "application/json"),
    ("CONSTANT text", {"form": "CONSTANT", "value": "alarm"}, b"alarm", "text/plain"),
    ("CONSTANT object", {"form": "CONSTANT", "value": {"a": 1}}, b'{"a":1}', "application/json"),
    ("TEMPLATE json", {"form": "TEMPLATE", "value": {"t": "$.data.temp", "d": "$.data.name"},
                       "template": '{"device": "${d}", "temperature": ${t}}'},
     b'{"device": "dev-7", "temperature": 31.5}', "application/json"),
    ("TEMPLATE text", {"form": "TEMPLATE", "value": {"t": "$.data.temp", "b": "$.data.site.building"},
                       "template": "building ${b}: ${t} C"}, b"building A: 31.5 C", "text/plain"),
    ("TEMPLATE value as JSON text", {"form": "TEMPLATE", "value": '{"t": "$.data.temp"}', "template": "${t}"},
     b"31.5", "application/json"),
    ("TEMPLATE missing variable value", {"form": "TEMPLATE", "value": {"x": "$.data.nope"}, "template": "x=${x}"},
     b"x=null", "text/plain"),
]


@pytest.mark.parametrize("name,spec,body,ctype", CASES, ids=[c[0] for c in CASES])
def test_transform(name, spec, body, ctype):
    out = compile_transform(spec).apply(EVENT)
    if body is None:
        assert out.original
    else:
        assert (out.body, out.content_type) == (body, ctype)


def test_a_transform_of_an_event_whose_data_is_not_an_object():
    out = compile_transform({"form": "JSONPATH", "value": "$.data.temp"}).apply({**EVENT, "data": "plain"})
    assert json.loads(out.body) is None


MALFORMED = [
    ({"form": "XSLT"}, "transform.form: 'XSLT' is not one of"),
    ("ORIGINAL", "transform: an object with \"form\""),
    ({"form": "JSONPATH"}, "transform.value: the JSONPATH form needs a value"),
    ({"form": "JSONPATH", "value": "data.temp"}, "transform.value: a JSONPath starting with $"),
    ({"form": "JSONPATH", "value": "$.data[[["}, "transform.value: bad JSONPath"),
    ({"form": "CONSTANT"}, "transform.value: the CONSTANT form needs a value"),
    ({"form": "ORIGINAL", "value": 1}, "transform.value: not a key of the ORIGINAL form"),
    ({"form": "TEMPLATE", "value": {"t": "$.data.temp"}}, "transform.template: the TEMPLATE form needs"),
    ({"form": "TEMPLATE", "value": {"t": "$.data.temp"}, "template": "${u}"}, "transform.template: ${u} is not"),
    ({"form": "TEMPLATE", "value": {"t": "temp"}, "template": "${t}"}, "transform.value.t: a JSONPath"),
    ({"form": "TEMPLATE", "value": "nope", "template": "x"}, "transform.value: the TEMPLATE form's value"),
    ({"form": "TEMPLATE", "value": [1], "template": "x"}, "transform.value: the TEMPLATE form's value"),
]


@pytest.mark.parametrize("spec,message", MALFORMED, ids=[m for _, m in MALFORMED])
def test_malformed_transform(spec, message):
    with pytest.raises(TransformError) as e:
        compile_transform(spec)
    assert str(e.value).startswith(message), str(e.value)
