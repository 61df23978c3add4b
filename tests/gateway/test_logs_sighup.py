"""``[log]`` (levels per logger, JSON lines, a rotating file) and SIGHUP on a real ``mqgate serve``."""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import sys
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest

from gateway.config import ConfigError
from gateway.logs import LogSettings, setup_logging
from serve_process import ServeProcess, free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("table, message", [
    ({"lvl": "INFO"}, "[log] unknown key 'lvl'"),
    ({"level": "LOUD"}, "[log] level must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL, not 'LOUD'"),
    ({"levels": {"urllib3": "DEBUG"}}, "[log.levels] 'urllib3': only loggers under mqgate."),
    ({"levels": {"mqgate.http": "chatty"}}, "[log.levels] 'mqgate.http' must be one of"),
    ({"format": "xml"}, "[log] format must be \"plain\" or \"json\""),
    ({"maxBytes": -1}, "[log] maxBytes must be an integer >= 0"),
])
def test_log_config_errors_name_the_key(table, message):
    with pytest.raises(ConfigError) as e:
        LogSettings.from_dict(table)
    assert str(e.value).startswith(message)


def test_a_bad_log_table_stops_serve_with_one_line_and_status_2(tmp_path):
    cfg = tmp_path / "m.toml"
    cfg.write_text('[log]\nlevel = "LOUD"\n')
    r = subprocess.run([sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--data-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2
    assert r.stderr == "mqgate: [log] level must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL, not 'LOUD'\n"


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
        h.close()
    for h in saved[0]:
        root.addHandler(h)
    root.setLevel(saved[1])
    logging.getLogger("mqgate.test").setLevel(logging.NOTSET)


def test_json_lines_into_a_rotating_file_with_levels_per_logger(tmp_path, restore_logging):
    path = tmp_path / "mqgate.log"
    setup_logging(LogSettings.from_dict({"format": "json", "file": str(path), "maxBytes": 2000, "backupCount": 2,
                                         "level": "WARNING", "levels": {"mqgate.test": "DEBUG"}}))
    logging.getLogger("mqgate.other").info("not shown: below WARNING")
    for i in range(40):
        logging.getLogger("mqgate.test").debug("line %d with ünïcode", i)
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("mqgate.test").exception("failed")
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["mqgate.log", "mqgate.log.1", "mqgate.log.2"]
    lines = [json.loads(ln) for p in tmp_path.iterdir() for ln in p.read_text(encoding="utf-8").splitlines()]
    assert all(set(ln) >= {"time", "level", "logger", "message"} for ln in lines)
    assert not [ln for ln in lines if ln["logger"] == "mqgate.other"]
    last = json.loads(path.read_text(encoding="utf-8").splitlines()[-1])
    assert last["message"] == "failed" and "ValueError: boom" in last["exc"]


def test_sighup_reloads_the_acl_and_log_levels_without_dropping_the_connection(tmp_path):
    acl = tmp_path / "acl"
    acl.write_text("topic readwrite open/#\n")
    cfg = tmp_path / "m.toml"
    cfg.write_text('[mqtt]\naclFile = "acl"\nsysInterval = 0\n[log.levels]\n"mqgate.gateway" = "WARNING"\n')
    with ServeProcess(tmp_path / "data", "--config", str(cfg), "--mqtt-port", str(free_port()), "--ws-port", "0",
                      "--namesrv-port", "0", "--broker-port", "0", env={"PYTHONPATH": str(ROOT)}) as proc:
        acks: queue.Queue = queue.Queue()
        gone: queue.Queue = queue.Queue()
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="hup", protocol=mqtt.MQTTv5)
        c.on_publish = lambda _c, _u, _mid, reason, _p: acks.put(reason.value)
        c.on_disconnect = lambda *_a: gone.put(True)
        c.connect("127.0.0.1", proc.ports["mqtt-tcp"])
        c.loop_start()
        try:
            c.publish("later/x", b"1", qos=1)
            assert acks.get(timeout=10) == 0x87  # Not authorized
            assert "mqgate.gateway:" not in proc.output()  # its INFO lines are off

            acl.write_text("topic readwrite open/#\ntopic readwrite later/#\n")
            cfg.write_text('[mqtt]\naclFile = "acl"\nsysInterval = 0\n[log.levels]\n"mqgate.gateway" = "INFO"\n')
            proc.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while "SIGHUP: reloaded" not in proc.output() and time.monotonic() < deadline:
                time.sleep(0.05)
            out = proc.output()
            assert "SIGHUP: reloaded log levels, MQTT password file, ACL file" in out
            assert "mqgate.gateway: ACL" in out and "reloaded (generation 1)" in out  # logged at INFO now

            c.publish("later/x", b"2", qos=1)
            assert acks.get(timeout=10) == 0  # the same connection, the new rules
            assert gone.empty()
        finally:
            c.disconnect()
            c.loop_stop()
