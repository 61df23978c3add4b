"""The gateway's metadata records as a fuzz target (issue 17): whatever the meta topic
holds, the gateway starts, restores every good record, and keeps serving.

Real broker on a temp store; records written into ``rmq_sys_mqtt_meta`` with the
broker's own send path, as the gateway writes them, then the gateway starts over
them. Inputs (hypothesis): records the gateway really writes with one field
replaced by an arbitrary msgpack value, and arbitrary ``[kind, key, value]``
bodies and bytes. After the start, a client resumes each fuzzed session id and
publishes, and the good session keeps its subscription and gets the message.
"""

from __future__ import annotations

import msgpack
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import Client, running_gateway
from core.store import Message
from gateway.meta import KINDS, META_TOPIC
from gateway.mqtt import Publish

SCALARS = st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats(allow_nan=True) | \
    st.text(max_size=20) | st.binary(max_size=20)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) |
                      st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)

GOOD_SESS = {"v": 5, "exp": 3600, "next": 0, "off": 0, "subs": {"keep/#": [1, False, False, 0, None]},
             "flows": {"receive_maximum": 20, "next_id": 1, "flows": []}, "gone": None}
TEMPLATES = {
    "sess": GOOD_SESS,
    "will": {"topic": "w/t", "payload": b"bye", "qos": 1, "retain": False, "payload_format_indicator": None,
             "message_expiry_interval": None, "content_type": None, "response_topic": None,
             "correlation_data": None, "will_delay_interval": 5, "user_properties": [], "gone": None},
    "in2": [1, 2],
    "ret": [0, 0],
    "live": {"subs": {"keep/#": [1, False, False, 0, None]}, "v": 5},
    "rel": {"node": "gw00000000", "by": "gw11111111", "clean": False},
}


@st.composite
def mutated(draw):
    kind = draw(st.sampled_from(KINDS))
    value = TEMPLATES[kind]
    if isinstance(value, dict):
        value = dict(value)
        field = draw(st.sampled_from(sorted(value)) | st.text(max_size=6))
        value[field] = draw(VALUES)
        if kind == "sess" and draw(st.booleans()) and isinstance(value.get("flows"), dict):
            value["flows"] = dict(value["flows"], flows=draw(st.lists(VALUES, max_size=3)))
    else:
        value = draw(st.lists(VALUES, max_size=3) | VALUES)
    return msgpack.packb([kind, "fz" + draw(st.text("abc", max_size=3)), value], use_bin_type=True)


RAW = st.one_of(
    mutated(),
    st.builds(lambda k, key, v: msgpack.packb([k, key, v], use_bin_type=True),
              st.sampled_from(KINDS) | SCALARS, VALUES, VALUES),
    st.binary(max_size=40),
)


def gw_keys(gw) -> list:
    """(kind, key) of what the gateway restored: sessions and wills."""
    return [("sess", k) for k in gw.router.sessions] + [("will", k) for k in gw.wills.keys]


async def _scenario(tmp_path, bodies: list[bytes]) -> None:
    root = tmp_path / "store"
    async with running_gateway(root) as (broker, gw, port):
        c, _ = await Client.connect(port, "keeper", version=5, clean_start=False,
                                    session_expiry_interval=3600)
        await c.subscribe("keep/#", qos=1)
        await c.disconnect()
        await trio.sleep(0.05)
    async with running_gateway(root) as (broker, gw, port):  # the broker's store, reopened: write the fuzz
        await broker.send_many([(Message(topic=META_TOPIC, body=b), 0) for b in bodies])
    async with running_gateway(root) as (broker, gw, port):
        assert "keeper" in gw.router.sessions
        fuzzed = sorted(k for (_kind, k) in gw_keys(gw) if k.startswith("fz")) + ["fza", "fzb"]
        for cid in fuzzed:
            try:
                f, _ = await Client.connect(port, cid, version=5, clean_start=False, expect=None)
                await f.send(Publish(topic=f"fuzz/{cid}", payload=b"x", qos=0))
                await trio.sleep(0.01)
                await f.stream.aclose()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        keeper, ack = await Client.connect(port, "keeper", version=5, clean_start=False,
                                           session_expiry_interval=3600)
        assert ack.session_present
        pub, _ = await Client.connect(port, "pub", version=5)
        await pub.send(Publish(topic="keep/alive", payload=b"still here", qos=0))
        got = await keeper.expect(Publish)
        assert got.payload == b"still here"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bodies=st.lists(RAW, min_size=1, max_size=6))
def test_any_meta_records_leave_the_gateway_starting_and_serving(tmp_path_factory, bodies):
    trio.run(_scenario, tmp_path_factory.mktemp("meta"), bodies)
