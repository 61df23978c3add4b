"""The pytest-friendly entry points: run a tiny scenario, check its accounting.

Rules it keeps: ``run_scenario`` never prints a progress bar and never
raises for a broker that misbehaves (the record says what happened);
``assert_exact_delivery`` is the one place that states what "every message
arrived once and in order" means for a record, with a message that shows the
numbers when it does not hold. Neither ever looks at timings.
"""

from __future__ import annotations

from . import runner
from .scenarios import Scenario


def run_scenario(name: str, host: str = "127.0.0.1", port: int = 1883, *,
                 broker: str = "target", broker_pid: int | None = None,
                 **options) -> dict:
    """Run scenario ``name`` (see ``scenarios.NAMES``) against host:port.

    ``options`` are ``Scenario`` fields (count, qos, publishers, subscribers,
    payload, rate, connections, protocol, mode, timeout, ...). Returns the
    result record, the same dict that ``results.jsonl`` holds.
    """
    return runner.run(Scenario(name, **options), host, port, broker=broker,
                      broker_pid=broker_pid, progress=False)


def assert_exact_delivery(rec: dict, *, allow_out_of_order: bool = False) -> None:
    """Every expected message arrived exactly once (and in order per publisher)."""
    summary = {k: rec.get(k) for k in ("label", "broker", "ok", "error", "sent", "expected",
                                       "delivered", "lost", "duplicated", "out_of_order",
                                       "foreign")}
    assert rec["ok"], f"run not ok: {summary}"
    assert rec["sent"] > 0 or rec["scenario"] == "storm", f"nothing sent: {summary}"
    assert rec["lost"] == 0, f"lost messages: {summary} {rec['per_publisher']}"
    assert rec["duplicated"] == 0, f"duplicated messages: {summary}"
    assert rec["delivered"] == rec["expected"], f"delivered != expected: {summary}"
    if not allow_out_of_order:
        assert rec["out_of_order"] == 0, f"out-of-order messages: {summary}"
