"""Transport x client matrix: a QoS 1 round trip through ``mqgate serve``.

One ``mqgate serve`` subprocess (``tests/support/serve_process.py``) with
every MQTT listener on: TCP, TLS, WebSocket (``/mqtt``) and WebSocket over
TLS. A throwaway CA, server certificate and client certificate (CN=dev1) are
made with Debian's ``openssl`` in a temp dir. The server runs with
``caFile`` (client certificates asked for, not required),
``useIdentityAsUsername`` and an ACL file in which only the user ``dev1``
may use ``secure/dev1/#``; every client may use ``matrix/#``.

Each cell subscribes at QoS 1, publishes one QoS 1 message to itself and
waits for it. Over TLS and WSS the client presents the client certificate
and uses ``secure/dev1/<cell>``: the round trip succeeds only if the
certificate's CN became the username the ACL sees (a client without the
certificate is refused that subscription, see
``test_secure_topics_need_the_certificate_identity``).

===================================  =====  =====  =====  =====
client                                TCP    TLS    WS     WSS
===================================  =====  =====  =====  =====
paho-mqtt 2.x, MQTT 3.1.1             yes    yes    yes    yes
paho-mqtt 2.x, MQTT 5.0               yes    yes    yes    yes
Debian mosquitto_pub/sub, 3.1.1       yes    yes    no     no
Debian mosquitto_pub/sub, 5.0         yes    yes    no     no
amqtt client (3.1.1 only)             yes    yes    yes    yes
===================================  =====  =====  =====  =====

Not covered, because the client cannot do it (not skipped: no such cell):

* mosquitto_pub/mosquitto_sub (Debian's 2.0.x) have no WebSocket transport:
  libmosquitto's client side speaks only TCP and TLS (no ``-L ws://``).
* amqtt's client speaks MQTT 3.1.1 only; there is no amqtt 5.0 cell.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from serve_process import ServeProcess, free_port

TRANSPORTS = ("tcp", "tls", "ws", "wss")
SECURE = ("tls", "wss")
TIMEOUT = 20.0  # bound on every wait for a peer; never an assertion about speed


# --- the server -----------------------------------------------------------------

def _openssl(d: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(d, "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=Matrix CA")
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name, subj in (("server", "/CN=localhost"), ("client", "/O=Acme/CN=dev1")):
        _openssl(d, "req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subj)
        _openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext")
    return d


@pytest.fixture(scope="module")
def server(tmp_path_factory, pki):
    d = tmp_path_factory.mktemp("matrix")
    (d / "acl").write_text(textwrap.dedent("""\
        pattern allow all matrix/#
        user dev1
        topic readwrite secure/dev1/#
    """))
    (d / "mqgate.toml").write_text(textwrap.dedent(f"""\
        [mqtt]
        tlsPort = {free_port()}
        wssPort = {free_port()}
        certFile = "{pki / 'server.crt'}"
        keyFile = "{pki / 'server.key'}"
        caFile = "{pki / 'ca.crt'}"
        useIdentityAsUsername = true
        aclFile = "{d / 'acl'}"
        sysInterval = 0
    """))
    proc = ServeProcess(d / "data", "--config", str(d / "mqgate.toml"), "--mqtt-port", str(free_port()),
                        "--ws-port", str(free_port()), "--namesrv-port", "0", "--broker-port", "0")
    with proc:
        assert {f"mqtt-{t}" for t in TRANSPORTS} <= set(proc.ports), proc.ports
        yield proc
        assert "Traceback" not in proc.output(), proc.output()


def _topic(cell: str, transport: str) -> str:
    return f"secure/dev1/{cell}" if transport in SECURE else f"matrix/{cell}/{transport}"


# --- paho-mqtt ---------------------------------------------------------------------

def _paho_roundtrip(port: int, transport: str, version: int, pki: Path, topic: str,
                    with_cert: bool = True) -> tuple[list, list]:
    """(granted QoS list, [(topic, payload, qos)] received)."""
    protocol = paho.MQTTv5 if version == 5 else paho.MQTTv311
    c = paho.Client(client_id=f"paho{version}-{transport}-{with_cert}", protocol=protocol,
                    transport="websockets" if transport in ("ws", "wss") else "tcp",
                    callback_api_version=paho.CallbackAPIVersion.VERSION2)
    if transport in ("ws", "wss"):
        c.ws_set_options(path="/mqtt")
    if transport in SECURE:
        if with_cert:
            c.tls_set(ca_certs=str(pki / "ca.crt"), certfile=str(pki / "client.crt"), keyfile=str(pki / "client.key"))
        else:
            c.tls_set(ca_certs=str(pki / "ca.crt"))
    connected, subscribed, received = threading.Event(), threading.Event(), threading.Event()
    granted, got = [], []

    def on_subscribe(client, userdata, mid, reason_codes, properties):
        granted.extend(rc.value for rc in reason_codes)
        subscribed.set()

    def on_message(client, userdata, msg):
        got.append((msg.topic, msg.payload, msg.qos))
        received.set()

    c.on_connect = lambda *a: connected.set()
    c.on_subscribe = on_subscribe
    c.on_message = on_message
    c.connect("127.0.0.1", port)
    c.loop_start()
    try:
        assert connected.wait(TIMEOUT), "no CONNACK"
        c.subscribe(topic, qos=1)
        assert subscribed.wait(TIMEOUT), "no SUBACK"
        if granted == [1]:
            info = c.publish(topic, b"round trip", qos=1)
            info.wait_for_publish(TIMEOUT)
            assert info.is_published(), "no PUBACK"
            assert received.wait(TIMEOUT), "the message did not come back"
    finally:
        c.disconnect()
        c.loop_stop()
    return granted, got


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("version", [4, 5], ids=["mqtt311", "mqtt5"])
def test_paho(server, pki, version, transport):
    topic = _topic(f"paho{version}", transport)
    granted, got = _paho_roundtrip(server.ports[f"mqtt-{transport}"], transport, version, pki, topic)
    assert granted == [1]
    assert got == [(topic, b"round trip", 1)]


@pytest.mark.parametrize("transport", SECURE)
def test_secure_topics_need_the_certificate_identity(server, pki, transport):
    """Without the client certificate (TLS still on) the client is anonymous:
    the ACL refuses ``secure/dev1/#`` (SUBACK 0x87 in 5.0)."""
    granted, got = _paho_roundtrip(server.ports[f"mqtt-{transport}"], transport, 5, pki,
                                   _topic("nocert", transport), with_cert=False)
    assert granted == [0x87] and got == []


# --- Debian's mosquitto clients -----------------------------------------------------

def _mosquitto_args(port: int, transport: str, version: str, pki: Path) -> list[str]:
    args = ["-h", "127.0.0.1", "-p", str(port), "-V", version]
    if transport == "tls":
        args += ["--cafile", str(pki / "ca.crt"), "--cert", str(pki / "client.crt"), "--key", str(pki / "client.key")]
    return args


@pytest.mark.parametrize("transport", ["tcp", "tls"])
@pytest.mark.parametrize("version", ["mqttv311", "mqttv5"])
def test_mosquitto_pub_sub(server, pki, version, transport):
    port = server.ports[f"mqtt-{transport}"]
    topic = _topic(f"mosquitto-{version}", transport)
    common = _mosquitto_args(port, transport, version, pki)
    # -d prints "Subscribed (mid: ...)" once the SUBACK is in: publish only then
    # (stdbuf: line-buffered stdout, else the pipe holds it until mosquitto_sub exits).
    sub = subprocess.Popen(["stdbuf", "-oL", "mosquitto_sub", *common, "-i", f"msub-{version}-{transport}", "-t", topic, "-q", "1",
                            "-C", "1", "-d", "-F", "GOT %t %p %q", "-W", str(int(TIMEOUT))],
                           stdout=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in sub.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("Subscribed"):
                break
        assert lines and lines[-1].startswith("Subscribed (mid: 1): 1"), lines
        subprocess.run(["mosquitto_pub", *common, "-i", f"mpub-{version}-{transport}", "-t", topic,
                        "-m", "round trip", "-q", "1"], check=True, timeout=TIMEOUT)
        rest = sub.communicate(timeout=TIMEOUT)[0].splitlines()
    finally:
        sub.kill()
        sub.wait()
    assert [line for line in rest if line.startswith("GOT ")] == [f"GOT {topic} round trip 1"], rest
    assert sub.returncode == 0


# --- amqtt ---------------------------------------------------------------------------

AMQTT_SCRIPT = r"""
import asyncio, sys
from amqtt.client import MQTTClient
from amqtt.mqtt.constants import QOS_1

async def main(uri, topic, ca, cert, key):
    config = {"check_hostname": False} if ca else {}
    if cert:
        config["connection"] = {"uri": uri, "cafile": ca, "certfile": cert, "keyfile": key}
    c = MQTTClient(client_id="amqtt-" + topic.replace("/", "-"), config=config)
    await c.connect(uri, cafile=ca or None)
    granted = await c.subscribe([(topic, QOS_1)])
    print("GRANTED", granted, flush=True)
    await c.publish(topic, b"round trip", qos=QOS_1)
    msg = await asyncio.wait_for(c.deliver_message(), %(timeout)s)
    print("GOT", msg.publish_packet.variable_header.topic_name, msg.publish_packet.payload.data.decode(),
          msg.publish_packet.qos, flush=True)
    await c.disconnect()

asyncio.run(main(*sys.argv[1:]))
""" % {"timeout": TIMEOUT}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_amqtt(server, pki, transport):
    port = server.ports[f"mqtt-{transport}"]
    scheme = {"tcp": "mqtt", "tls": "mqtts", "ws": "ws", "wss": "wss"}[transport]
    uri = f"{scheme}://127.0.0.1:{port}/" + ("mqtt" if transport in ("ws", "wss") else "")
    topic = _topic("amqtt", transport)
    tls = [str(pki / "ca.crt"), str(pki / "client.crt"), str(pki / "client.key")] if transport in SECURE else ["", "", ""]
    out = subprocess.run([sys.executable, "-c", AMQTT_SCRIPT, uri, topic, *tls], capture_output=True, text=True,
                         timeout=TIMEOUT * 2)
    lines = out.stdout.splitlines()
    assert lines == ["GRANTED [1]", f"GOT {topic} round trip 1"], (out.stdout, out.stderr[-3000:])
