"""A broker alone (`mqgate broker`, no MQTT gateway) serves its own /metrics when an HTTP
port is set, so a slave or a broker of a cluster is scraped like `mqgate serve`; the
MQTT API answers there in one line where it lives. Real processes: a name server and
a broker, our producer."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from serve_process import ServeProcess, free_port

ROOT = Path(__file__).resolve().parents[3]


def _series(url: str) -> dict:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_a_broker_alone_serves_its_metrics_and_no_mqtt_api(tmp_path):
    users = tmp_path / "b" / "http_users"
    r = subprocess.run([sys.executable, "-m", "gateway", "passwd", "--admin", str(users), "ops", "-b", "pw"],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert r.returncode == 0, r.stderr
    with ServeProcess(tmp_path / "ns", "--namesrv-port", str(free_port()), role="namesrv") as ns:
        namesrv = f"127.0.0.1:{ns.ports['namesrv']}"
        http = free_port()
        with ServeProcess(tmp_path / "b", "--broker-port", str(free_port()), "--namesrv", namesrv,
                          "--http-port", str(http), role="broker") as broker:
            assert broker.ports["http"] == http
            url = f"http://127.0.0.1:{http}"
            before = _series(url)
            assert not [k for k in before if k[0].startswith("mqgate_mqtt_")]  # no gateway here
            from core.client import Message, Producer

            producer = Producer(namesrv, "PG-alone").start()
            try:
                deadline = time.monotonic() + 20
                while True:  # the broker registers with the name server shortly after it starts
                    try:
                        producer.send(Message("Alone", b"metered"))
                        break
                    except Exception:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.2)
            finally:
                producer.shutdown()
            after = _series(url)
            assert after[("mqgate_broker_topic_puts_total", (("topic", "Alone"),))] == 1
            assert after[("mqgate_broker_commitlog_written_bytes_total", ())] > before[
                ("mqgate_broker_commitlog_written_bytes_total", ())]
            answer = httpx.get(f"{url}/api/v1/clients", auth=("ops", "pw"), timeout=10)
            assert answer.status_code == 404 and "no MQTT gateway" in answer.json()["error"]
            assert httpx.get(f"{url}/api/v1/clients", timeout=10).status_code == 401
            assert httpx.get(f"{url}/dashboard/", timeout=10).status_code == 404
    # without a port, a broker alone runs no HTTP (18083 stays free for mqgate serve)
    with ServeProcess(tmp_path / "b2", "--broker-port", str(free_port()), role="broker") as quiet:
        assert "http" not in quiet.ports
