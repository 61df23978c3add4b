"""The dashboard on a real ``mqgate serve``: a real headless Chromium, real
paho-mqtt clients, a real native RocketMQ producer and consumer group.

One server for the module. Users: ``root`` (admin), ``viewer`` (read-only).
Each page the browser visits is saved as a screenshot under
``test-artifacts/dashboard/`` (gitignored) for a person to look at.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import paho.mqtt.client as mqtt
import pytest

from serve_process import ServeProcess, free_port

ROOT = Path(__file__).resolve().parents[3]
SHOTS = ROOT / "test-artifacts" / "dashboard"
ADMIN = ("root", "root-pw")
VIEWER = ("viewer", "viewer-pw")
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def mqgate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("dash")
    data = d / "data"
    assert mqgate("passwd", "--admin", str(data / "http_users"), ADMIN[0], "-b", ADMIN[1]).returncode == 0
    assert mqgate("passwd", "--admin", str(data / "http_users"), VIEWER[0], "--role", "read-only",
                  "-b", VIEWER[1]).returncode == 0
    cfg = d / "mqgate.toml"
    cfg.write_text('[mqtt]\nallowAnonymous = true\nsysInterval = 0\ntraceMqttTopics = ["traced/#"]\n')
    http, events = free_port(), free_port()
    proc = ServeProcess(data, "--config", str(cfg), "--mqtt-port", str(free_port()), "--ws-port", "0",
                        "--namesrv-port", str(free_port()), "--broker-port", str(free_port()),
                        "--http-port", str(http), "--events-port", str(events), env={"PYTHONPATH": str(ROOT)})
    with proc:
        proc.url = f"http://127.0.0.1:{http}"
        proc.events_url = f"http://127.0.0.1:{events}/api/v1/events"
        yield proc


class Device:
    """A paho-mqtt client that stays down once the server disconnects it (no
    automatic reconnect); ``disconnects`` gets each reason code."""

    def __init__(self, port: int, client_id: str, username: str | None = None) -> None:
        self.connacks: queue.Queue = queue.Queue()
        self.disconnects: queue.Queue = queue.Queue()
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
        if username:
            self.c.username_pw_set(username, "x")
        self.c.on_connect = lambda _c, _u, _f, rc, _p: self.connacks.put(rc.value)

        def on_disconnect(c, _u, _f, rc, _p):
            self.disconnects.put(rc.value)
            c.disconnect()  # ends paho's reconnect loop

        self.c.on_disconnect = on_disconnect
        self.c.connect("127.0.0.1", port, keepalive=30)
        self.c.loop_start()
        assert self.connacks.get(timeout=10) == 0

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def _chrome():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    if not Path(CHROMEDRIVER).exists():
        pytest.fail(f"{CHROMEDRIVER} is missing: `make test-deps` installs chromium-driver")

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900",
                "--disable-gpu"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


class Browser:
    def __init__(self, driver, base: str) -> None:
        self.d = driver
        self.base = base
        SHOTS.mkdir(parents=True, exist_ok=True)

    def css(self, selector: str):
        return self.d.find_elements("css selector", selector)

    def one(self, selector: str):
        return self.d.find_element("css selector", selector)

    def rows(self) -> list[str]:
        return [r.get_attribute("data-client") for r in self.css("#clients tbody tr[data-client]")]

    def go(self, path: str) -> None:
        self.d.get(self.base + path)

    def shot(self, name: str) -> None:
        self.d.save_screenshot(str(SHOTS / f"{name}.png"))

    def submit(self, selector: str, *, confirm: bool = False) -> None:
        """Click a link or button and wait for the next page (accepting the
        confirmation dialog first when there is one)."""
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.support import expected_conditions
        from selenium.webdriver.support.ui import WebDriverWait

        page = self.one("html")

        def left(_driver) -> bool:
            try:
                page.is_enabled()
            except WebDriverException:  # stale, or Chrome's "Node ... does not belong to the document"
                return True
            return False

        self.one(selector).click()
        if confirm:
            WebDriverWait(self.d, 5).until(expected_conditions.alert_is_present()).accept()
        WebDriverWait(self.d, 10).until(left)

    def login(self, user: tuple[str, str]) -> None:
        self.one("#username").send_keys(user[0])
        self.one("#password").send_keys(user[1])
        self.submit("#login")

    @staticmethod
    def wait_for(predicate, timeout: float = 10.0):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value or time.monotonic() > deadline:
                return value
            time.sleep(0.05)


@pytest.fixture(scope="module")
def browser(server):
    driver = _chrome()
    try:
        yield Browser(driver, server.url)
    finally:
        driver.quit()


def _broker_traffic(server) -> None:
    """A message with key ``order-42`` in ``orders``; a consumer group ``billing``
    that consumed it and committed; then two more messages in that message's
    queue: a lag of 2 (lag counts only the queues a group has committed, and a
    consumer may stop before it committed the others)."""
    from core.client import ConsumeFromWhere, Message, Producer, PushConsumer

    namesrv = f"127.0.0.1:{server.ports['namesrv']}"
    producer = Producer(namesrv, "dash-producer").start()
    try:
        first = producer.send(Message("orders", b'{"order": 42, "sku": "A-7"}', tags="new", keys=["order-42"]))
        seen = []
        consumer = PushConsumer(namesrv, "billing", consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.subscribe("orders", "*", lambda msgs, ctx: seen.extend(msgs)).start()
        try:
            assert Browser.wait_for(lambda: seen, 20), "the consumer group got nothing"
        finally:
            consumer.shutdown()  # commits its offsets
        for i in (43, 44):
            producer.send(Message("orders", f'{{"order": {i}}}'.encode(), keys=[f"order-{i}"]), queue=first.queue)
    finally:
        producer.shutdown()


def test_admin_finds_a_client_kicks_it_finds_a_message_and_logs_out(server, browser):
    mqtt_port = server.ports["mqtt-tcp"]
    device = Device(mqtt_port, "truck-0042", username="fleet")
    other = Device(mqtt_port, "sensor-7")
    _broker_traffic(server)
    b = browser
    try:
        # not logged in: any page goes to the login page, and back to it after login
        b.go("/dashboard/clients")
        assert "/dashboard/login" in b.d.current_url
        b.shot("login")
        b.login(ADMIN)
        assert b.d.current_url.endswith("/dashboard/clients")
        assert {"truck-0042", "sensor-7"} <= set(b.rows())
        # find the client by part of its id, then by its username
        box = b.one("#search")
        box.clear()
        box.send_keys("0042")
        b.submit("#search-button")
        assert "q=0042" in b.d.current_url
        assert b.rows() == ["truck-0042"]
        b.go("/dashboard/clients?q=fleet")
        assert b.rows() == ["truck-0042"]
        b.shot("clients-search")
        # its details, then kick it
        b.submit('#clients a[href$="/clients/truck-0042"]')
        assert b.one("#peer").text.startswith("127.0.0.1:")
        b.shot("client")
        b.submit("#kick", confirm=True)
        assert device.disconnects.get(timeout=10) == 0x98  # Administrative action
        assert "Kicked truck-0042" in b.one("#flash").text
        b.go("/dashboard/clients?state=online")
        assert "truck-0042" not in b.rows() and "sensor-7" in b.rows()
        # the overview: charts and the disk
        b.go("/dashboard/")
        assert len(b.css("svg.chart")) == 4 and b.one("#stat-disk").text.endswith("%")
        b.shot("overview")
        b.go("/dashboard/subscriptions")
        b.shot("subscriptions")
        b.go("/dashboard/retained")
        b.shot("retained")
        # broker topics with their queue offsets; sessions' own queues hidden
        b.go("/dashboard/topics")
        topics = b.one("#topics").text
        assert "orders" in topics and "%LMQ%" not in topics
        b.shot("topics")
        # the consumer groups: billing's lag, and audit's member while it runs
        from core.client import PushConsumer

        audit = PushConsumer(f"127.0.0.1:{server.ports['namesrv']}", "audit")
        audit.subscribe("orders", "*", lambda msgs, ctx: None).start()
        try:
            def audit_member():
                b.go("/dashboard/groups")
                found = b.css('section.group[data-group="audit"] .members')
                return found and "1 member" in b.one('section.group[data-group="audit"]').text and found[0].text

            members = b.wait_for(audit_member, 15)
            assert members and "CLUSTERING" in members
            group = b.one('section.group[data-group="billing"]')
            assert "lag 2" in group.text and "orders" in group.text
            b.shot("groups")
        finally:
            audit.shutdown()
        # a message by key, with its body
        b.go("/dashboard/messages")
        b.one("#topic").send_keys("orders")
        b.one("#key").send_keys("order-42")
        b.submit("#find")
        assert b.one("#found-count").text.startswith("1 message")
        assert '"order": 42' in b.one("section.message pre.body").text
        assert b.one("section.message .msg-keys").text == "order-42"
        msg_id = b.one("section.message .msg-id").text
        b.shot("messages")
        # the same message by its id, no topic given
        b.go(f"/dashboard/messages?msgId={msg_id}")
        assert '"order": 42' in b.one("section.message pre.body").text
        b.go("/dashboard/replication")
        assert b.one("#role").text == "ASYNC_MASTER"  # the default brokerRole
        cluster = b.one("#cluster").text  # every broker the name server knows, as `admin cluster list`
        assert "broker-a" in cluster and "ASYNC_MASTER" in cluster, cluster
        assert "No mqgate gateway nodes" in b.one("#gateway-nodes").text
        b.shot("replication")
        # log out: back to the login page, and the old cookie no longer works
        cookie = b.d.get_cookie("mqgate-session")["value"]
        b.submit("#logout")
        assert "/dashboard/login" in b.d.current_url
        r = httpx.get(server.url + "/dashboard/clients", cookies={"mqgate-session": cookie})
        assert r.status_code == 303 and "/dashboard/login" in r.headers["location"]
    finally:
        device.close()
        other.close()


def test_read_only_user_sees_no_kick_button_and_a_forged_post_is_403(server, browser):
    device = Device(server.ports["mqtt-tcp"], "ro-target")
    b = browser
    try:
        b.d.delete_all_cookies()
        b.go("/dashboard/clients")
        b.login(VIEWER)
        assert "ro-target" in b.rows()
        assert b.css("button.kick") == [] and b.css("button.danger") == []
        b.go("/dashboard/clients/ro-target")
        assert b.css("#kick") == [] and b.css("#delete-session") == []
        b.shot("clients-read-only")
        cookie = b.d.get_cookie("mqgate-session")["value"]
        csrf = b.one('form.logout input[name="csrf"]').get_attribute("value")
        r = httpx.post(server.url + "/dashboard/clients/ro-target/kick", data={"csrf": csrf},
                       cookies={"mqgate-session": cookie})
        assert r.status_code == 403 and "read-only" in r.text
        assert device.disconnects.empty()
        b.submit("#logout")
    finally:
        device.close()


def _login(server, user) -> tuple[httpx.Client, str]:
    c = httpx.Client(base_url=server.url, timeout=20)
    r = c.post("/dashboard/login", data={"username": user[0], "password": user[1], "next": "/dashboard/clients"})
    assert r.status_code == 303 and r.headers["location"] == "/dashboard/clients"
    set_cookie = r.headers["set-cookie"].lower()
    assert "httponly" in set_cookie and "samesite=strict" in set_cookie
    page = c.get("/dashboard/clients").text
    return c, re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)


def test_posts_need_the_sessions_csrf_token(server):
    device = Device(server.ports["mqtt-tcp"], "csrf-target")
    try:
        c, csrf = _login(server, ADMIN)
        assert c.post("/dashboard/clients/csrf-target/kick", data={}).status_code == 403
        assert c.post("/dashboard/clients/csrf-target/kick", data={"csrf": "0" * 40}).status_code == 403
        _other, other_csrf = _login(server, ADMIN)  # another session's token is not this one's
        assert other_csrf != csrf
        assert c.post("/dashboard/clients/csrf-target/kick", data={"csrf": other_csrf}).status_code == 403
        r = httpx.post(server.url + "/dashboard/clients/csrf-target/kick", data={"csrf": csrf})  # no session
        assert r.status_code == 403
        assert device.disconnects.empty()
        r = c.post("/dashboard/clients/csrf-target/kick", data={"csrf": csrf})
        assert r.status_code == 303 and device.disconnects.get(timeout=10) == 0x98
    finally:
        device.close()


def test_pages_redirect_to_login_and_login_never_redirects_off_the_dashboard(server):
    for path in ("/dashboard/", "/dashboard/groups", "/dashboard/messages?key=x"):
        r = httpx.get(server.url + path)
        assert r.status_code == 303 and r.headers["location"].startswith("/dashboard/login?next=")
    r = httpx.post(server.url + "/dashboard/login",
                   data={"username": ADMIN[0], "password": ADMIN[1], "next": "//evil.example/"})
    assert r.status_code == 303 and r.headers["location"] == "/dashboard/"
    r = httpx.post(server.url + "/dashboard/login", data={"username": ADMIN[0], "password": "wrong"})
    assert r.status_code == 401 and "Wrong username or password" in r.text
    assert httpx.get(server.url + "/dashboard/static/dash.js").status_code == 200


def test_retained_message_view_escapes_and_delete(server):
    pub = Device(server.ports["mqtt-tcp"], "retainer")
    try:
        pub.c.publish("site/1/<b>status</b>", b"online & well", qos=1, retain=True).wait_for_publish(10)
    finally:
        pub.close()
    c, csrf = _login(server, ADMIN)
    page = c.get("/dashboard/retained", params={"topic": "site/1/<b>status</b>"}).text
    assert "online &amp; well" in page and "site/1/&lt;b&gt;status&lt;/b&gt;" in page
    r = c.post("/dashboard/retained/delete", data={"csrf": csrf, "topic": "site/1/<b>status</b>"})
    assert r.status_code == 303 and "flash=Cleared" in r.headers["location"]
    assert Browser.wait_for(lambda: "status&lt;/b&gt;" not in c.get("/dashboard/retained").text)


def test_delete_an_offline_session_and_find_a_message_by_client_message_id(server):
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    from core.client import Message, Producer

    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 3600
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="parked-7", protocol=mqtt.MQTTv5)
    c.connect("127.0.0.1", server.ports["mqtt-tcp"], keepalive=30, clean_start=False, properties=props)
    c.loop_start()
    done = queue.Queue()
    c.on_subscribe = lambda *_a: done.put(True)
    c.subscribe("parked/#", qos=1)
    done.get(timeout=10)
    c.disconnect()
    c.loop_stop()
    web, csrf = _login(server, ADMIN)
    assert Browser.wait_for(lambda: 'data-client="parked-7"' in web.get("/dashboard/clients?state=offline").text)
    page = web.get("/dashboard/clients", params={"q": "parked"}).text
    assert "Delete session" in page and "Kick" not in page  # offline: nothing to kick
    r = web.post("/dashboard/clients/parked-7/delete", data={"csrf": csrf})
    assert r.status_code == 303 and "flash=Deleted" in r.headers["location"]
    assert 'data-client="parked-7"' not in web.get("/dashboard/clients").text
    assert web.get("/dashboard/clients/parked-7").status_code == 404

    producer = Producer(f"127.0.0.1:{server.ports['namesrv']}", "dash-producer-2").start()
    try:
        sent = producer.send(Message("invoices", b"\x00\xff binary", keys=["inv-1"]))
    finally:
        producer.shutdown()
    page = web.get("/dashboard/messages", params={"msgId": sent.msg_id}).text  # the client's id (UNIQ_KEY)
    assert "1 message found" in page and "00 ff 20 62" in page and "shown as hex" in page


def test_event_rules_page_shows_each_rules_counts_and_an_admin_disables_one(server, browser):
    api = server.events_url
    r = httpx.post(f"{api}/buses", json={"name": "plant"}, auth=ADMIN, timeout=20)
    assert r.status_code == 201, r.text
    r = httpx.post(f"{api}/rules", auth=ADMIN, timeout=20, json={
        "name": "too-hot", "bus": "plant", "pattern": {"data": {"temp": [{"numeric": [">", 30]}]}},
        "targets": [{"type": "mqtt", "topic": "plant/alerts", "qos": 0}]})
    assert r.status_code == 201, r.text
    batch = b'[{"specversion": "1.0", "id": "e1", "source": "line-1", "type": "reading", "data": {"temp": 35}},' \
            b' {"specversion": "1.0", "id": "e2", "source": "line-1", "type": "reading", "data": {"temp": 20}}]'
    r = httpx.post(f"{api}/buses/plant/events", content=batch, auth=ADMIN, timeout=20,
                   headers={"content-type": "application/cloudevents-batch+json"})
    assert r.status_code == 200, r.text
    assert Browser.wait_for(lambda: httpx.get(f"{api}/rules/plant/too-hot", auth=ADMIN,
                                              timeout=20).json()["delivered"] == 1, timeout=60)
    b = browser
    b.d.delete_all_cookies()
    b.go("/dashboard/events")
    b.login(ADMIN)
    row = b.one('tr[data-rule="plant/too-hot"]').text
    assert "running" in row and "mqtt" in row, row
    b.shot("events")
    # a read-only user sees the page but may not switch a rule
    viewer, viewer_csrf = _login(server, VIEWER)
    page = viewer.get("/dashboard/events").text
    assert "too-hot" in page and "Disable" not in page
    assert viewer.post("/dashboard/events/rules/plant/too-hot/disable", data={"csrf": viewer_csrf}).status_code == 403
    admin, csrf = _login(server, ADMIN)
    r = admin.post("/dashboard/events/rules/plant/too-hot/disable", data={"csrf": csrf})
    assert r.status_code == 303 and "disabled" in r.headers["location"]
    assert httpx.get(f"{api}/rules/plant/too-hot", auth=ADMIN, timeout=20).json()["enabled"] is False
    assert "Enable" in admin.get("/dashboard/events").text
    r = admin.post("/dashboard/events/rules/plant/nope/enable", data={"csrf": csrf})
    assert r.status_code == 303 and "no+rule" in r.headers["location"]


def _group_with_lag(server, topic: str, group: str) -> None:
    """``group`` consumed and committed ``topic``'s first message; two more wait (lag 2)."""
    from core.client import ConsumeFromWhere, Message, Producer, PushConsumer

    namesrv = f"127.0.0.1:{server.ports['namesrv']}"
    producer = Producer(namesrv, "dash-producer-2").start()
    try:
        first = producer.send(Message(topic, b"first"))
        seen = []
        consumer = PushConsumer(namesrv, group, consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.subscribe(topic, "*", lambda msgs, ctx: seen.extend(msgs)).start()
        try:
            assert Browser.wait_for(lambda: seen, 30), "the consumer group got nothing"
        finally:
            consumer.shutdown()
        for body in (b"second", b"third"):
            producer.send(Message(topic, body), queue=first.queue)
    finally:
        producer.shutdown()


def test_admin_actions_create_a_topic_reset_a_group_and_trace_a_message_found_by_time(server):
    admin, csrf = _login(server, ADMIN)
    viewer, viewer_csrf = _login(server, VIEWER)
    # create a topic (admins only; the form is not shown to read-only users)
    assert 'id="create-topic"' in admin.get("/dashboard/topics").text
    assert 'id="create-topic"' not in viewer.get("/dashboard/topics").text
    assert viewer.post("/dashboard/topics/create", data={"csrf": viewer_csrf, "name": "nope"}).status_code == 403
    r = admin.post("/dashboard/topics/create", data={"csrf": csrf, "name": "made-here", "queues": "3"})
    assert r.status_code == 303 and "created+with+3+queues" in r.headers["location"], r.headers["location"]
    assert re.search(r"<td>made-here</td><td>3/3</td>", admin.get("/dashboard/topics").text)
    r = admin.post("/dashboard/topics/create", data={"csrf": csrf, "name": "bad topic!", "queues": "3"})
    assert "not+created" in r.headers["location"]
    # reset a group's offsets to now: its lag goes to 0
    _group_with_lag(server, "resets", "resetter")
    page = admin.get("/dashboard/groups").text
    assert re.search(r'data-group="resetter".*?lag 2', page, re.S)
    r = admin.post("/dashboard/groups/resetter/reset", data={"csrf": csrf, "topic": "resets", "time": "now"})
    assert r.status_code == 303 and "reset+to+now" in r.headers["location"], r.headers["location"]
    assert re.search(r'data-group="resetter".*?lag 0', admin.get("/dashboard/groups").text, re.S)
    # an MQTT publish on a traced topic, found by its store time, and its path
    before = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() - 5))
    dev = Device(server.ports["mqtt-tcp"], "tracer")
    try:
        dev.c.publish("traced/line-1", b"t=21", qos=1).wait_for_publish(10)
    finally:
        dev.close()
    page = admin.get("/dashboard/messages", params={"topic": "traced", "from": before}).text
    assert "1 message found" in page and "t=21" in page, page
    link = re.search(r'class="trace-link" href="([^"]+)"', page).group(1).replace("&amp;", "&")
    assert Browser.wait_for(lambda: "published over MQTT" in admin.get(link).text, 30)
    assert admin.get("/dashboard/messages", params={"from": before}).text.count("needs a topic") == 1
    assert "cannot read the time" in admin.get("/dashboard/messages", params={"topic": "traced", "from": "soon"}).text
