"""The HTTP server of a real ``mqgate serve``: /metrics, the admin API and its CLI verbs.

One server for the module (a subprocess, real ports on 127.0.0.1), real
paho-mqtt clients, real HTTP (httpx), the exposition parsed with
prometheus-client's own parser. Users: ``root`` (admin), ``viewer``
(read-only); MQTT: a password file with ``dev`` plus anonymous access.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import paho.mqtt.client as mqtt
import pytest
from prometheus_client.parser import text_string_to_metric_families

from serve_process import ServeProcess, free_port

ROOT = Path(__file__).resolve().parents[3]
ADMIN = ("root", "root-pw")
VIEWER = ("viewer", "viewer-pw")


def mqgate(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("http")
    data = d / "data"
    assert mqgate("passwd", "--admin", str(data / "http_users"), ADMIN[0], "-b", ADMIN[1]).returncode == 0
    r = mqgate("passwd", "--admin", str(data / "http_users"), VIEWER[0], "--role", "read-only", "-b", VIEWER[1])
    assert r.returncode == 0, r.stderr
    assert mqgate("passwd", str(d / "mqtt_passwd"), "dev", "-b", "dev-pw").returncode == 0
    cfg = d / "mqgate.toml"
    cfg.write_text('[mqtt]\npasswordFile = "mqtt_passwd"\nallowAnonymous = true\nsysInterval = 0\n')
    http = free_port()
    proc = ServeProcess(data, "--config", str(cfg), "--mqtt-port", str(free_port()), "--ws-port", "0",
                        "--namesrv-port", str(free_port()), "--broker-port", str(free_port()), "--http-port", str(http),
                        env={"PYTHONPATH": str(ROOT)})
    with proc:
        proc.url = f"http://127.0.0.1:{http}"
        yield proc


class Paho:
    """A paho-mqtt client in its own thread; ``disconnects`` gets each disconnect's reason code."""

    def __init__(self, port: int, client_id: str, *, version=mqtt.MQTTv5, auth=None, clean=True) -> None:
        self.messages: queue.Queue = queue.Queue()
        self.disconnects: queue.Queue = queue.Queue()
        self.connacks: queue.Queue = queue.Queue()
        kw = {} if version == mqtt.MQTTv5 else {"clean_session": clean}
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=version, **kw)
        if auth:
            self.c.username_pw_set(*auth)
        self.c.on_message = lambda _c, _u, m: self.messages.put((m.topic, m.payload, m.qos))
        self.c.on_connect = lambda _c, _u, _f, rc, _p: self.connacks.put(rc.value)
        self.c.on_disconnect = lambda _c, _u, _f, rc, _p: self.disconnects.put(rc.value)
        props = None
        if version == mqtt.MQTTv5 and not clean:
            from paho.mqtt.properties import Properties
            from paho.mqtt.packettypes import PacketTypes
            props = Properties(PacketTypes.CONNECT)
            props.SessionExpiryInterval = 3600
        self.c.connect("127.0.0.1", port, keepalive=30, properties=props)
        self.c.loop_start()
        self.rc = self.connacks.get(timeout=10)

    def subscribe(self, flt: str, qos: int) -> None:
        done: queue.Queue = queue.Queue()
        self.c.on_subscribe = lambda *_a: done.put(True)
        self.c.subscribe(flt, qos=qos)
        done.get(timeout=10)

    def publish(self, topic: str, payload: bytes, qos: int, retain: bool = False) -> None:
        self.c.publish(topic, payload, qos=qos, retain=retain).wait_for_publish(10)

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def mqtt_port(server) -> int:
    return server.ports["mqtt-tcp"]


def scrape(server) -> dict[tuple[str, tuple], float]:
    r = httpx.get(server.url + "/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def api(server, method: str, path: str, auth=ADMIN, **kw) -> httpx.Response:
    return httpx.request(method, server.url + path, auth=auth, timeout=20, **kw)


def wait_for(predicate, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def cli(server, *args: str, auth=ADMIN) -> subprocess.CompletedProcess:
    env = {"MQGATE_URL": server.url}
    if auth:
        env |= {"MQGATE_USER": auth[0], "MQGATE_PASSWORD": auth[1]}
    return mqgate("admin", *args, env=env)


# ---- /metrics ----------------------------------------------------------------------------------

def test_metrics_move_when_real_clients_work_and_parse_with_prometheus_client(server):
    before = scrape(server)
    sub = Paho(mqtt_port(server), "m-sub", clean=False)
    pub = Paho(mqtt_port(server), "m-pub", version=mqtt.MQTTv311, auth=("dev", "dev-pw"))
    bad = Paho(mqtt_port(server), "m-bad", version=mqtt.MQTTv311, auth=("dev", "wrong"))
    assert bad.rc != 0
    bad.c.loop_stop()
    try:
        sub.subscribe("metrics/#", 2)
        for qos in (0, 1, 2):
            pub.publish(f"metrics/q{qos}", b"x" * 10, qos)
        got = [sub.messages.get(timeout=10) for _ in range(3)]
        assert sorted(q for _t, _p, q in got) == [0, 1, 2]
        after = scrape(server)

        def delta(name, **labels):
            key = (name, tuple(sorted(labels.items())))
            return after.get(key, 0) - before.get(key, 0)

        assert after[("mqgate_mqtt_connections", (("listener", "tcp"), ("protocol", "5.0")))] >= 1
        assert after[("mqgate_mqtt_connections", (("listener", "tcp"), ("protocol", "3.1.1")))] >= 1
        for qos in "012":
            assert delta("mqgate_mqtt_messages_received_total", qos=qos) == 1
            assert delta("mqgate_mqtt_messages_sent_total", qos=qos) == 1
        assert delta("mqgate_mqtt_received_bytes_total") > 30
        assert delta("mqgate_mqtt_sent_bytes_total") > 30
        assert delta("mqgate_mqtt_auth_failures_total") == 1
        assert delta("mqgate_mqtt_subscriptions") >= 1
        assert after[("mqgate_mqtt_sessions", (("state", "online"),))] >= 2
        assert after[("mqgate_mqtt_persistent_sessions", ())] >= 1
        assert after[("process_resident_memory_bytes", ())] > 1e6
        assert after[("process_open_fds", ())] > 3
        assert ("process_cpu_seconds_total", ()) in after
        # bounded cardinality: no label holds an MQTT topic or a client id
        labels = {v for (_n, ls) in after for (_k, v) in ls}
        assert not {v for v in labels if "metrics/" in v or v.startswith("m-")}
    finally:
        sub.close()
        pub.close()
    r = api(server, "DELETE", "/api/v1/sessions/m-sub")
    assert r.status_code == 200, r.text


def test_broker_series_per_broker_topic_and_group_move_with_real_producers_and_consumers(server):
    from core.client import ConsumeFromWhere, PushConsumer

    before = scrape(server)
    sess = Paho(mqtt_port(server), "fleet-keeper", clean=False)  # owns a session queue (%LMQ%...)
    sess.subscribe("fleet/#", 1)
    pub = Paho(mqtt_port(server), "fleet-pub")
    for i in range(3):
        pub.publish(f"fleet/truck{i}/gps", b"1,2", 1)
    for _ in range(3):
        sess.messages.get(timeout=10)
    pub.close()
    sess.close()
    seen = []
    consumer = PushConsumer(f"127.0.0.1:{server.ports['namesrv']}", "ops-billing",
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe("fleet", "*", lambda msgs, ctx: seen.extend(msgs)).start()
    try:
        assert wait_for(lambda: len(seen) >= 3, 30)
    finally:
        consumer.shutdown()  # commits its offsets
    after = scrape(server)
    assert after[("mqgate_broker_topic_puts_total", (("topic", "fleet"),))] - before.get(
        ("mqgate_broker_topic_puts_total", (("topic", "fleet"),)), 0) == 3
    assert after[("mqgate_broker_topic_gets_total", (("topic", "fleet"),))] >= 3
    assert after[("mqgate_broker_consumer_lag", (("group", "ops-billing"), ("topic", "fleet")))] == 0
    assert after[("mqgate_broker_commitlog_written_bytes_total", ())] > before[
        ("mqgate_broker_commitlog_written_bytes_total", ())]
    assert 0 < after[("mqgate_broker_disk_used_ratio", ())] < 1
    assert ("mqgate_broker_flush_seconds_count", ()) in after
    assert ("mqgate_broker_replication_seconds_count", ()) in after
    assert after[("mqgate_broker_put_durable_seconds_count", ())] == 0  # ASYNC_FLUSH: puts never wait  # a master (no slave: no wait yet)
    assert ("mqgate_broker_timers_pending", ()) in after and ("mqgate_broker_transactions_pending", ()) in after
    labels = {v for (_n, ls) in after for (_k, v) in ls}
    assert not [v for v in labels if v.startswith("%LMQ%") or "fleet-keeper" in v or "truck" in v]
    api(server, "DELETE", "/api/v1/sessions/fleet-keeper")


def test_broker_series_move_with_the_cpp_client(server):
    """The same series with the official C++ client (PyPI `rocketmq`) producing and consuming."""
    from rocketmq.client import Message, Producer, PushConsumer

    namesrv = f"127.0.0.1:{server.ports['namesrv']}"
    key = ("mqgate_broker_topic_puts_total", (("topic", "cppfleet"),))
    before = scrape(server)
    producer = Producer("ops-cpp-pg")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        for i in range(4):
            m = Message("cppfleet")
            m.set_body(f"reading {i}")
            producer.send_sync(m)
    finally:
        producer.shutdown()
    assert wait_for(lambda: scrape(server).get(key, 0) - before.get(key, 0) == 4, 10)
    seen: list = []

    def listen(m):
        seen.append(m.body)  # returning normally acknowledges it

    consumer = PushConsumer("ops-cpp-billing")
    consumer.set_namesrv_addr(namesrv)
    consumer.subscribe("cppfleet", listen)
    consumer.start()
    try:
        assert wait_for(lambda: len(seen) >= 4, 30)
        lag = ("mqgate_broker_consumer_lag", (("group", "ops-cpp-billing"), ("topic", "cppfleet")))
        assert wait_for(lambda: scrape(server).get(lag) == 0, 20)  # the C++ client commits every 5 s
    finally:
        consumer.shutdown()
    assert scrape(server)[("mqgate_broker_topic_gets_total", (("topic", "cppfleet"),))] >= 4


# ---- authentication and malformed requests ---------------------------------------------------

@pytest.mark.parametrize("path", ["/api/v1/clients", "/api/v1/sessions", "/api/v1/retained",
                                  "/api/v1/subscriptions", "/api/v1/stats"])
def test_unauthenticated_requests_are_refused_with_a_one_line_json_reason(server, path):
    for auth in (None, ("root", "wrong"), ("nobody", "x")):
        r = api(server, "GET", path, auth=auth)
        assert r.status_code == 401
        assert r.headers["www-authenticate"].startswith("Basic")
        body = r.json()
        assert list(body) == ["error"] and "\n" not in body["error"] and body["error"]


def test_malformed_requests_get_4xx_and_never_a_traceback(server):
    cases = [
        ("GET", "/api/v1/sessions?limit=abc", {}, 400),
        ("GET", "/api/v1/sessions?limit=0", {}, 400),
        ("GET", "/api/v1/clients?offset=-1", {}, 400),
        ("GET", "/api/v1/nothing", {}, 404),
        ("GET", "/api/v1/clients/nobody-here", {}, 404),
        ("DELETE", "/api/v1/retained/no/such/topic", {}, 404),
        ("POST", "/api/v1/clients", {}, 405),
        ("POST", "/api/v1/login", {"auth": None, "content": b"{not json"}, 400),
        ("POST", "/api/v1/login", {"auth": None, "json": {"username": 1}}, 400),
        ("POST", "/api/v1/login", {"auth": None, "content": b"\xff\xfe"}, 400),
        ("GET", "/api/v1/clients", {"auth": None, "headers": {"Authorization": "Basic !!!"}}, 401),
        ("GET", "/api/v1/clients", {"auth": None, "headers": {"Authorization": "Digest x"}}, 401),
        ("GET", "/api/v1/clients", {"auth": None, "headers": {"Authorization": "Bearer nope"}}, 401),
    ]
    for method, path, kw, status in cases:
        r = api(server, method, path, **({"auth": ADMIN} | kw))
        assert r.status_code == status, (method, path, r.status_code, r.text)
        assert "Traceback" not in r.text and "error" in r.json(), r.text
    # not HTTP at all: the server answers 400 (or closes), and keeps serving
    with socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), timeout=5) as s:
        s.sendall(b"\x16\x03\x01 garbage\r\n\r\n")
        answer = s.recv(4096)
    assert answer == b"" or answer.startswith(b"HTTP/1.1 400")
    assert b"Traceback" not in answer
    assert api(server, "GET", "/api/v1/stats").status_code == 200


def test_a_login_token_works_as_a_bearer_with_its_users_role(server):
    r = api(server, "POST", "/api/v1/login", auth=None, json={"username": VIEWER[0], "password": VIEWER[1]})
    assert r.status_code == 200 and r.json()["role"] == "read-only"
    headers = {"Authorization": f"Bearer {r.json()['token']}"}
    assert api(server, "GET", "/api/v1/sessions", auth=None, headers=headers).status_code == 200
    assert api(server, "DELETE", "/api/v1/sessions/x", auth=None, headers=headers).status_code == 403
    assert api(server, "POST", "/api/v1/login", auth=None, json={"username": "viewer", "password": "no"}
               ).status_code == 401


# ---- kick, sessions, retained, subscriptions ---------------------------------------------------

def test_kick_a_real_client_through_the_api_and_it_sees_the_disconnect(server):
    c = Paho(mqtt_port(server), "kick-api")
    try:
        r = api(server, "GET", "/api/v1/clients/kick-api")
        assert r.status_code == 200 and r.json()["protocol"] == "5.0"
        r = api(server, "DELETE", "/api/v1/clients/kick-api")
        assert r.status_code == 200 and r.json() == {"clientId": "kick-api", "kicked": True}
        assert c.disconnects.get(timeout=10) == 0x98  # Administrative action
        assert api(server, "GET", "/api/v1/clients/kick-api").status_code == 404
    finally:
        c.c.loop_stop()


def test_kick_a_real_311_client_with_the_cli_and_it_sees_the_disconnect(server):
    c = Paho(mqtt_port(server), "kick-cli", version=mqtt.MQTTv311)
    try:
        r = cli(server, "clients", "list")
        assert r.returncode == 0, r.stderr
        assert r.stdout.split("\n")[0].split()[:3] == ["clientId", "username", "peer"]
        assert any(line.startswith("kick-cli ") for line in r.stdout.splitlines())
        r = cli(server, "clients", "kick", "kick-cli")
        assert (r.returncode, r.stdout) == (0, "client kick-cli kicked\n"), r.stderr
        assert c.disconnects.get(timeout=10) != 0  # an unexpected disconnect for paho
    finally:
        c.c.loop_stop()


def test_a_read_only_user_cannot_kick(server):
    c = Paho(mqtt_port(server), "stays")
    try:
        r = api(server, "DELETE", "/api/v1/clients/stays", auth=VIEWER)
        assert r.status_code == 403 and "read-only" in r.json()["error"]
        r = cli(server, "clients", "kick", "stays", auth=VIEWER)
        assert r.returncode == 1 and r.stderr.startswith("mqgate admin: user 'viewer' is read-only")
        assert r.stderr.rstrip().endswith("(HTTP 403)")
        assert c.disconnects.empty()
        assert api(server, "GET", "/api/v1/clients/stays", auth=VIEWER).status_code == 200
    finally:
        c.close()


def test_sessions_subscriptions_and_retained_through_the_cli(server):
    c = Paho(mqtt_port(server), "keeper", clean=False)
    c.subscribe("shelf/#", 1)
    c.publish("shelf/a", b"retained!", 1, retain=True)
    c.messages.get(timeout=10)
    c.close()
    show = json.loads(cli(server, "--json", "sessions", "show", "keeper").stdout)
    assert show["online"] is False and show["persistent"] is True
    assert show["subscriptionList"] == [{"filter": "shelf/#", "qos": 1, "noLocal": False,
                                         "retainAsPublished": False, "retainHandling": 0}]
    subs = json.loads(cli(server, "subscriptions", "list", "--client", "keeper", "--json").stdout)
    assert [(s["clientId"], s["filter"]) for s in subs["items"]] == [("keeper", "shelf/#")]
    ret = json.loads(cli(server, "retained", "list", "--json").stdout)
    assert {"topic": "shelf/a", "qos": 1, "size": 9} in ret["items"]
    r = cli(server, "retained", "delete", "shelf/a")
    assert (r.returncode, r.stdout) == (0, "retained message on shelf/a deleted\n"), r.stderr
    assert "shelf/a" not in cli(server, "retained", "list").stdout
    r = cli(server, "sessions", "delete", "keeper")
    assert r.returncode == 0, r.stderr
    r = cli(server, "sessions", "show", "keeper")
    assert r.returncode == 1 and r.stderr == "mqgate admin: session 'keeper' does not exist (HTTP 404)\n"
    # the session really ended: a reconnect finds none
    c2 = Paho(mqtt_port(server), "keeper", clean=False)
    try:
        assert wait_for(lambda: api(server, "GET", "/api/v1/sessions/keeper").json().get("subscriptions") == 0)
    finally:
        c2.close()


def test_the_cli_says_in_one_line_when_it_cannot_log_in_or_reach_the_server(server):
    r = cli(server, "sessions", "list", auth=None)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "(HTTP 401)" in r.stderr
    r = mqgate("admin", "clients", "list", "--url", f"http://127.0.0.1:{free_port()}")
    assert r.returncode == 1 and r.stderr.startswith("mqgate admin: cannot reach the HTTP API at")
    r = mqgate("admin", "clients", "frob")
    assert r.returncode == 2


def test_every_series_operations_md_lists_is_exposed_and_every_exposed_one_is_listed(server):
    import re

    text = (ROOT / "docs" / "OPERATIONS.md").read_text()
    documented = {re.sub(r"_total$", "", n) for n in re.findall(r"`((?:mqgate|process)_[a-z_]+)`", text)}
    exposed = {f.name for f in text_string_to_metric_families(httpx.get(server.url + "/metrics").text)}
    assert documented - exposed == set()
    assert {n for n in exposed if n.startswith("mqgate_")} - documented == set()
