"""The standard set (S1..S5, L0, L1) against each target broker, fresh each time.

Rules it keeps:

- Each scenario gets a freshly started broker (clean memory, clean store);
  ours gets ``--flush sync`` where the standard set says so (S2).
- Our server must start: if it does not, the bench stops before measuring
  anything with ``BenchError`` naming the command and its output, and says how
  to bench the others alone (``--targets mosquitto,rabbitmq,amqtt``).
- A broker that cannot run a scenario (amqtt has no MQTT 5) still yields a
  record, with ``ok`` False and the reason, so the report shows the gap.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from . import brokers, report, runner, scenarios


# RabbitMQ's MQTT plugin speaks 5.0 from 3.13; Debian 12 ships 3.10
MQTT_311_ONLY = ("amqtt", "rabbitmq")


class BenchError(RuntimeError):
    pass


def standard(scale: float = 1.0, only: list[str] | None = None):
    """[(id, Scenario, flush_sync)] of the standard set, counts scaled."""
    out = []
    for sid, s, sync in scenarios.STANDARD:
        if only and sid not in only:
            continue
        s = dataclasses.replace(s)
        if scale != 1.0:
            if s.name == "storm":
                s.connections = max(10, int(s.connections * scale))
            else:
                s.count = max(10, int(s.count * scale))
        out.append((sid, s, sync))
    return out


def preflight_ours() -> None:
    try:
        with brokers.Broker("ours", flush_sync=False):
            pass
    except brokers.BrokerStartError as exc:
        raise BenchError(
            "our server did not start, so there is nothing to compare against.\n"
            f"{exc}\n"
            "To bench the other brokers alone: python -m loadtest bench "
            "--targets mosquitto,rabbitmq,amqtt") from None


def run(targets: list[str], out: Path, *, scale: float = 1.0,
        only: list[str] | None = None, progress: bool | None = None,
        echo=print) -> list[dict]:
    for t in targets:
        if t not in brokers.KNOWN:
            raise BenchError(f"unknown target {t!r}; known: {', '.join(brokers.KNOWN)}")
        if not brokers.available(t):
            raise BenchError(f"target {t} is not installed here")
    if "ours" in targets:
        preflight_ours()
    records = []
    for sid, s, sync in standard(scale, only):
        for target in targets:
            if target in MQTT_311_ONLY and s.protocol == 5:
                rec = runner.empty_record(s, target, "127.0.0.1", 0)
                rec["error"] = f"{target} speaks MQTT 3.1.1 only"
            else:
                rec = _one(target, s, sync and target == "ours", progress)
            records.append(rec)
            report.write_jsonl([rec], out / "results.jsonl")
            echo(report.format_record(rec), file=sys.stderr)
    reference = targets[0]
    rows = report.ratios(records, reference)
    report.write_jsonl(rows, out / "ratios.jsonl")
    if rows:
        echo(report.format_ratios(rows), file=sys.stderr)
    (out / "table.md").write_text(report.markdown_table(records, reference))
    echo(f"table for the README: {out / 'table.md'}", file=sys.stderr)
    path = report.write_html(records, out, reference=reference,
                             title="mqgate standard load test")
    echo(f"report: {path}", file=sys.stderr)
    return records


def _one(target: str, s: scenarios.Scenario, flush_sync: bool, progress) -> dict:
    try:
        with brokers.Broker(target, flush_sync=flush_sync) as b:
            return runner.run(s, b.host, b.port, broker=target, broker_pid=b.pid,
                              progress=progress)
    except brokers.BrokerStartError as exc:
        rec = runner.empty_record(s, target, "127.0.0.1", 0)
        rec["error"] = f"broker did not start: {exc}"
        return rec
