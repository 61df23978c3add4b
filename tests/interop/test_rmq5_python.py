"""The unmodified PyPI ``rocketmq-python-client`` (5.x, gRPC) against a real ``mqgate serve``.

The client runs in its own process (``rmq5_client.py``, which says why); the
server is a subprocess with a free gRPC port. Each test uses fresh topic and
group names.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from serve_process import ServeProcess, free_port

DRIVER = Path(__file__).with_name("rmq5_client.py")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    grpc_port = free_port()
    with ServeProcess(tmp_path_factory.mktemp("rmq5") / "data", "--namesrv-port", "0", "--broker-port", "0",
                      "--mqtt-port", "0", "--ws-port", "0", "--grpc-port", str(grpc_port)) as s:
        assert s.ports["grpc"] == grpc_port
        yield s


def drive(server, scenario: str, *args: str) -> dict:
    r = subprocess.run([sys.executable, str(DRIVER), f"127.0.0.1:{server.ports['grpc']}", scenario, *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{scenario} failed:\n{r.stderr[-3000:]}\nserver log:\n{server.output()[-3000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def names(*bases: str) -> list[str]:
    suffix = uuid.uuid4().hex[:8]
    return [f"{b}_{suffix}" for b in bases]


def test_producer_sends_normal_delay_and_fifo_and_a_simple_consumer_receives_each_once(server):
    topic, group = names("rmq5_topic", "rmq5_group")
    out = drive(server, "send_and_receive", topic, group)
    got = {m["body"]: m for m in out["got"]}
    assert sorted(m["id"] for m in out["got"]) == sorted(out["sent"])  # each once, with the producer's ids
    normal = got["normal"]
    assert (normal["tag"], normal["keys"], normal["properties"], normal["attempt"]) == ("TagA", ["k1"], {"color": "red"}, 1)
    # the delayed message is not visible before its delivery time (whole seconds on the wire)
    assert got["delayed"]["at"] >= out["deliver_at"] - 0.5
    assert max(got[b]["at"] for b in got if b != "delayed") < got["delayed"]["at"]
    for g in ("g1", "g2"):  # each message group in send order, with its group
        seq = [m["body"] for m in out["got"] if m["group"] == g]
        assert seq == [f"{g}-{i}" for i in range(3)]
    # acked: nothing comes back, and the empty receive long-polled (the consumer's await duration, 5 s)
    assert out["after_ack"] == []
    assert out["empty_wait"] >= 4.0


def test_unacked_message_comes_back_with_its_attempt_and_a_changed_invisible_time_holds(server):
    topic, group = names("rmq5_redeliver", "rmq5_redeliver_group")
    ev = drive(server, "redelivery", topic, group)["events"]
    first = ev[0]
    assert first == {"step": "first", "got": [["a", 1], ["b", 1], ["c", 1]]}
    again = [e for e in ev if e["step"] == "again"]
    # b was not acked: back after its 2 s invisible time, second attempt; c's time was changed to 7 s
    assert [(e["body"], e["attempt"]) for e in again] == [("b", 2), ("c", 2)]
    b, c = again
    assert 1.0 <= b["after"] < 6.0
    assert c["after"] >= 6.0
    stale = next(e for e in ev if e["step"] == "stale_ack")
    assert stale["error"] is not None and "40013" in stale["error"] and "stale" in stale["error"]
    assert ev[-1] == {"step": "left", "got": []}  # a was acked, b and c acked after redelivery


def test_transactions_commit_roll_back_and_an_open_one_is_checked_through_telemetry_and_committed(tmp_path):
    """A half nobody ends is checked back (transactionTimeOut 1 s) over the producer's
    Telemetry stream; its checker commits it."""
    config = tmp_path / "mqgate.toml"
    config.write_text("[broker]\ntransactionTimeOut = 1000\ntransactionCheckInterval = 1000\n")
    grpc_port = free_port()
    with ServeProcess(tmp_path / "data", "--config", str(config), "--namesrv-port", "0", "--broker-port",
                      str(free_port()), "--mqtt-port", "0", "--ws-port", "0", "--grpc-port", str(grpc_port)) as s:
        topic, group = names("rmq5_tx", "rmq5_tx_group")
        out = drive(s, "transactions", topic, group)
    assert out["checked"] == ["left open"]
    assert sorted(out["got"]) == ["committed", "left open"]


def test_a_half_whose_producer_is_away_longer_than_the_check_count_waits_and_its_checker_commits_it(tmp_path):
    """Issue 17: checks that find no producer connected are not counted against
    transactionCheckMax (2 here), so the half outlives many intervals unchecked
    and a producer of its topic that comes back is asked and commits it."""
    config = tmp_path / "mqgate.toml"
    config.write_text("[broker]\ntransactionTimeOut = 1000\ntransactionCheckInterval = 1000\n"
                      "transactionCheckMax = 2\n")
    with ServeProcess(tmp_path / "data", "--config", str(config), "--namesrv-port", "0", "--broker-port",
                      str(free_port()), "--mqtt-port", "0", "--ws-port", "0", "--grpc-port", str(free_port())) as s:
        topic, group = names("rmq5_tx_away", "rmq5_tx_away_group")
        left = drive(s, "tx_leave_open", topic)["id"]
        waiting = f"no producer of group %GRPC%{topic} is connected"  # logged once per interval
        deadline = time.monotonic() + 30
        while (s.output().count(waiting) < 4 and "rolling it back" not in s.output()  # 4: twice transactionCheckMax
               and time.monotonic() < deadline):
            time.sleep(0.2)
        assert "rolling it back" not in s.output() and s.output().count(waiting) >= 4, s.output()[-3000:]
        out = drive(s, "tx_commit_on_check", topic, group)
        assert "rolling it back" not in s.output()
    assert out["checked"] == ["left open"]
    assert out["got"] == [["left open", left]]


def test_a_push_consumer_consumes_and_a_failed_message_comes_back_once(server):
    topic, group = names("rmq5_push", "rmq5_push_group")
    seen = [tuple(x) for x in drive(server, "push", topic, group)["seen"]]
    # every message once; the one that failed (the client nacks it with the 1 s backoff the
    # broker's settings gave) again with attempt 2, then never more
    assert sorted(seen) == [("one", 1), ("retry-me", 1), ("retry-me", 2), ("two", 1)]


def test_pop_state_survives_a_restart(tmp_path):
    """A message in flight stays invisible for the rest of its time across a restart and
    comes back with attempt 2; an acked one does not come back. (Without the saved state
    both would be delivered again at once, with attempt 1.)"""
    grpc_port = free_port()
    args = ("--namesrv-port", "0", "--broker-port", "0", "--mqtt-port", "0", "--ws-port", "0",
            "--grpc-port", str(grpc_port))
    topic, group = names("rmq5_restart", "rmq5_restart_group")
    s = ServeProcess(tmp_path / "data", *args).start()
    try:
        before = drive(s, "restart_before", topic, group)
        assert before["got"] == ["done", "keep"]
        assert s.stop() == 0
        s.start()
        after = drive(s, "restart_after", topic, group)
    finally:
        s.kill()
    assert (tmp_path / "data" / "config" / "popState.json").exists()
    assert after["first"] == []
    assert [(body, attempt) for body, attempt, _ in after["later"]] == [("keep", 2)]
    (_, _, at), = after["later"]
    assert at - before["at"] >= 12  # received with a 15 s invisible time, minus the time the receive took


def test_the_settings_exchange_gives_the_producer_the_broker_s_body_limit(tmp_path):
    """[broker] maxMessageSize reaches the 5.x producer through Telemetry: it refuses a larger
    body itself (without the settings it would allow 4 MiB), and sends a smaller one."""
    config = tmp_path / "mqgate.toml"
    config.write_text("[broker]\nmaxMessageSize = 2048\n")
    grpc_port = free_port()
    with ServeProcess(tmp_path / "data", "--config", str(config), "--namesrv-port", "0", "--broker-port", "0",
                      "--mqtt-port", "0", "--ws-port", "0", "--grpc-port", str(grpc_port)) as s:
        (topic,) = names("rmq5_limit")
        too_big = drive(s, "body_limit", topic, "2049")
        smaller = drive(s, "body_limit", topic, "1024")
    assert too_big["id"] is None and "max size=2048" in too_big["error"]
    assert smaller["error"] is None and smaller["id"]


def test_a_fifo_push_consumer_sees_each_message_group_in_order(tmp_path):
    """The group is made FIFO with `mqgate admin group update --orderly true` (what Java's
    mqadmin updateSubGroup -o true sends); the 5.x PushConsumer then runs its FIFO
    consumption, retrying a failed message in place before the next of its group."""
    grpc_port, namesrv_port = free_port(), free_port()
    topic, group = names("rmq5_fifo", "rmq5_fifo_group")
    with ServeProcess(tmp_path / "data", "--namesrv-port", str(namesrv_port), "--broker-port", str(free_port()),
                      "--mqtt-port", "0", "--ws-port", "0", "--grpc-port", str(grpc_port)) as s:
        r = subprocess.run([sys.executable, "-m", "gateway", "admin", "--namesrv", f"127.0.0.1:{namesrv_port}",
                            "group", "update", group, "--orderly", "true"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "consumeMessageOrderly" in r.stdout and "True" in r.stdout
        seen = drive(s, "push_fifo", topic, group)["seen"]
    for g in ("g1", "g2"):
        bodies = [b for b, mg in seen if mg == g]
        assert [b for i, b in enumerate(bodies) if i == 0 or b != bodies[i - 1]] == [f"{g}-{i}" for i in range(3)], seen
    assert [b for b, _ in seen].count("g1-0") == 2  # failed once, consumed again before g1-1


def test_lite_topics_reach_the_lite_consumer_that_subscribed_them_and_a_plain_consumer_sees_all(server):
    """A LiteSimpleConsumer receives the lite topics it subscribes to (SyncLiteSubscription),
    from when it subscribes until it unsubscribes; each lite message is stored once, in the
    parent topic, whose plain consumers get it too."""
    topic, group, plain_group = names("rmq5_lite", "rmq5_lite_group", "rmq5_plain_group")
    out = drive(server, "lite", topic, group, plain_group)
    assert out["a_only"] == [["a1", "a", topic]]
    assert out["a_only_more"] == []
    assert out["then_b"] == [["b1", "b", topic]]
    assert out["b_only"] == [["b2", "b", topic]]
    assert out["bad_name"] is not None and "40020" in out["bad_name"]
    assert sorted(b for b, _, _ in out["plain"]) == ["a1", "a2", "b1", "b2", "plain"]
    assert {b: lt for b, lt, _ in out["plain"]}["plain"] is None


def test_a_lite_push_consumer_consumes_the_lite_topic_it_subscribed_once(server):
    topic, group = names("rmq5_lite_push", "rmq5_lite_push_group")
    assert drive(server, "lite_push", topic, group)["seen"] == [["a1", "a", 1]]


def test_tls_and_access_keys_on_the_grpc_port(tmp_path):
    """[proxy] certFile/keyFile (TLS, as the 5.x clients use by default) and aclFile (the
    clients' MQv2-HMAC-SHA1 signature, checked against plain-ACL accounts): a known account
    sends and receives; a wrong secret is refused, a read-only account's send FORBIDDEN."""
    def run(*args):
        subprocess.run(["openssl", *args], cwd=tmp_path, check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=Test CA")
    (tmp_path / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.crt", "-days", "2", "-extfile", "server.ext")
    (tmp_path / "acl.toml").write_text(
        '[[accounts]]\naccessKey = "rocketmq2"\nsecretKey = "12345678"\ndefaultTopicPerm = "PUB|SUB"\n'
        'defaultGroupPerm = "SUB"\n\n[[accounts]]\naccessKey = "readonly1"\nsecretKey = "87654321"\n'
        'defaultTopicPerm = "SUB"\ndefaultGroupPerm = "SUB"\n')
    config = tmp_path / "mqgate.toml"
    config.write_text('[proxy]\ncertFile = "server.crt"\nkeyFile = "server.key"\naclFile = "acl.toml"\n')
    grpc_port = free_port()
    topic, group = names("rmq5_secure", "rmq5_secure_group")
    env = {**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(tmp_path / "ca.crt")}
    with ServeProcess(tmp_path / "data", "--config", str(config), "--namesrv-port", "0", "--broker-port", "0",
                      "--mqtt-port", "0", "--ws-port", "0", "--grpc-port", str(grpc_port)) as s:
        r = subprocess.run([sys.executable, str(DRIVER), f"127.0.0.1:{grpc_port}", "secure", topic, group],
                           capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 0, f"{r.stderr[-3000:]}\nserver log:\n{s.output()[-3000:]}"
        assert "(TLS, access keys required)" in s.output()
        # SIGHUP reads the ACL file again: the read-only account may now publish
        acl = tmp_path / "acl.toml"
        acl.write_text(acl.read_text().replace('defaultTopicPerm = "SUB"', 'defaultTopicPerm = "PUB|SUB"'))
        s.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while "reloaded" not in s.output() or "gRPC ACL file" not in s.output().split("SIGHUP: reloaded")[-1]:
            assert time.monotonic() < deadline, s.output()[-2000:]
            time.sleep(0.05)
        after = subprocess.run([sys.executable, str(DRIVER), f"127.0.0.1:{grpc_port}", "secure_send", topic,
                                "readonly1", "87654321"], capture_output=True, text=True, timeout=120, env=env)
        assert after.returncode == 0, after.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["sent"] and out["got"] == ["over tls"]
    # the client reports its refused route query (UNAUTHORIZED, tests/core/proxy/test_auth.py) this way
    assert out["bad_secret"] is not None and "failed to fetch topic" in out["bad_secret"]
    assert out["read_only"] is not None and "40300" in out["read_only"]
