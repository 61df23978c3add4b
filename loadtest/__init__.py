"""loadtest: an MQTT load generator that works against any broker on loopback.

It imports paho-mqtt, the standard library and (for the report) matplotlib;
never project code. Our own server is only ever started as a process.

Command line (stdout is JSON lines, one record per scenario x broker)::

    python -m loadtest run fan-in --host 127.0.0.1 --port 1883 \\
        --compare mosquitto,amqtt --count 5000 --qos 1 --out results/
    python -m loadtest bench [--targets ours,mosquitto,rabbitmq,amqtt] [--only S1,S2]
    python -m loadtest report results/

Scenarios (``scenarios.NAMES``): fan-in, fan-out, p2p, shared, qos, payload,
persistent, storm, latency.

Reusing the tiny scenarios in a test (e.g. against our embedded server)::

    from loadtest import run_scenario, assert_exact_delivery

    def test_fan_in_qos1(our_server):          # a fixture giving host, port, pid
        rec = run_scenario("fan-in", our_server.host, our_server.port,
                           broker_pid=our_server.pid,
                           publishers=2, count=200, qos=1, timeout=20)
        assert_exact_delivery(rec)             # lost == 0, no dups, in order

``run_scenario`` returns the record (see ``runner.RECORD_KEYS``): sent,
expected, delivered, lost, duplicated, out_of_order, per_publisher, rates,
latency_ms (p50/p90/p99/max/cdf), broker CPU/RSS, connects_per_s and
rss_per_1000_mib (storm). ``Broker("mosquitto")`` / ``Broker("amqtt")`` /
``Broker("ours")`` start a broker on a free loopback port as a context
manager (``.host``, ``.port``, ``.pid``).

Layout, one job per module: ``codec`` (raw MQTT packets), ``accounting``
(stamps, lost/dup/order, percentiles), ``rawclient`` / ``pahoclient`` (the two
client modes), ``worker`` (one client process), ``scenarios`` (who does what),
``runner`` (one scenario x one broker -> record), ``procstat`` (/proc CPU and
RSS), ``brokers`` (start/stop compared brokers), ``report`` (JSONL, ratios,
HTML, PNG), ``progress`` (stderr bar), ``bench`` (standard set), ``cli``.
"""

from .brokers import Broker, BrokerStartError, free_port
from .check import assert_exact_delivery, run_scenario
from .runner import RECORD_KEYS, NotLoopback, require_loopback
from .scenarios import NAMES, Scenario

__all__ = [
    "Broker", "BrokerStartError", "free_port", "assert_exact_delivery", "run_scenario",
    "RECORD_KEYS", "NotLoopback", "require_loopback", "NAMES", "Scenario",
]
