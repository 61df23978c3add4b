"""`mqgate admin` as a user runs it: a real `mqgate serve` process and `python -m gateway admin`
processes; exit statuses, one-line errors, global options anywhere, mqadmin's verb names."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from serve_process import ServeProcess, free_port


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("admin-cli")
    with ServeProcess(d / "data", "--mqtt-port", "0", "--ws-port", "0", "--namesrv-port", str(free_port()),
                      "--broker-port", str(free_port())) as srv:
        yield f"127.0.0.1:{srv.ports['namesrv']}"


def mqadmin(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway", "admin", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


def ok(*args: str, **kw) -> str:
    r = mqadmin(*args, **kw)
    assert r.returncode == 0, r.stderr
    return r.stdout


def fails(code: int, *args: str) -> str:
    r = mqadmin(*args)
    assert r.returncode == code, (r.stdout, r.stderr)
    assert r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr  # one line, no traceback
    return r.stderr


def test_global_options_anywhere(server):
    ok("topic", "create", "CliTopic", "--queues", "2", "--namesrv", server)
    # the old parser answered "unrecognized arguments: --namesrv" (exit 2)
    assert "CliTopic" in json.loads(ok("topic", "list", "--namesrv", server, "--json"))["topics"]
    assert "CliTopic" in ok("-n", server, "topicList")
    assert "CliTopic" in ok("topic", "list", env={"NAMESRV_ADDR": server})


def test_mqadmin_verbs_and_tables(server):
    ok("updateTopic", "-n", server, "-t", "CliOrdered", "-w", "3", "-o", "true")
    route = json.loads(ok("topicRoute", "-t", "CliOrdered", "-n", server, "--json"))
    assert route["orderTopicConf"] == "broker-a:3"
    status = ok("topicStatus", "-t", "CliOrdered", "-n", server).splitlines()
    assert status[0].split() == ["brokerName", "queueId", "minOffset", "maxOffset", "lastUpdated"] and len(status) == 4
    listing = ok("clusterList", "-n", server).splitlines()
    assert listing[0].split()[:4] == ["cluster", "brokerName", "brokerId", "addr"]
    assert listing[1].split()[:3] == ["DefaultCluster", "broker-a", "0"]
    runtime = json.loads(ok("brokerStatus", "-n", server, "--json"))["brokers"]["broker-a"]
    assert runtime["earliestMessageTimeStamp"] == "-1"  # nothing stored in this server yet
    assert "deleted topic CliOrdered from broker-a" in ok("deleteTopic", "-n", server, "-t", "CliOrdered")
    assert "CliOrdered" not in ok("topic", "list", "-n", server)


def test_errors_are_one_line_with_a_status(server):
    assert "consumer group nosuchgroup is unknown" in fails(1, "group", "progress", "nosuchgroup", "-n", server)
    assert "topic NoSuchTopic does not exist" in fails(1, "topic", "status", "NoSuchTopic", "-n", server)
    assert "topic NoSuchTopic does not exist" in fails(1, "topic", "delete", "NoSuchTopic", "-n", server)
    assert "is not a message id" in fails(2, "message", "id", "not-an-id", "-n", server)
    # a C++ client's UNIQ_KEY (ip backwards): not dialled as 1.0.0.127, looked up and reported
    err = fails(1, "message", "id", "0100007F3A9C000051D200000F2A6B1C", "-n", server)
    assert "no message with id" in err and "1.0.0.127" in err
    assert "no name server answered" in fails(1, "topic", "list", "-n", f"127.0.0.1:{free_port()}")
    r = mqadmin("topic", "frobnicate", "-n", server)
    assert r.returncode == 2 and "invalid choice" in r.stderr


def test_help_lists_both_verb_forms():
    out = ok("--help")
    for verb in ("topic", "cluster", "group", "deleteTopic", "topicStatus", "clusterList", "consumerConnection",
                 "resetOffsetByTime"):
        assert verb in out
