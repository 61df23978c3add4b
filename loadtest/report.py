"""Result output: JSON lines, ratios between brokers, HTML report with PNG charts.

Rules it keeps:

- ``results.jsonl`` holds one record per scenario x broker, exactly the
  runner's record (the machine-readable contract); everything else here is
  derived from those records, so a report can be rebuilt from the file alone
  (``python -m loadtest report DIR``).
- Ratios are ``reference / other`` for the same scenario label, measured in
  the same run; a ratio is None when either side is missing or zero.
- ``table.md`` is the README's Performance table, one row per scenario and
  one column per broker, then each other broker's ratio to the reference:
  delivered msgs/s for throughput, MiB per 1000 connections and connects/s
  for a storm, p50/p99 for latency runs; a lost message is always shown.
- Charts use matplotlib's Agg backend (no display) and are written next to
  ``report.html``, which links them by relative name.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

# metric -> True when higher is better (only used to word the report)
METRICS = {
    "publish_rate": True, "delivered_rate": True, "lost": False,
    "latency_p50_ms": False, "latency_p99_ms": False, "latency_max_ms": False,
    "broker_cpu_s": False, "broker_rss_peak_mib": False,
    "connects_per_s": True, "rss_per_1000_mib": False, "generator_cpu_s": False,
}


def metric(rec: dict, name: str):
    if name.startswith("latency_"):
        key = name[len("latency_"):-len("_ms")]
        return (rec.get("latency_ms") or {}).get(key)
    return rec.get(name)


def write_jsonl(records, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        for rec in records:
            f.write(json.dumps(rec, sort_keys=True) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def ratios(records, reference: str) -> list[dict]:
    """One row per (label, other broker): {metric: reference / other}."""
    by_label: dict[str, dict[str, dict]] = {}
    for rec in records:
        by_label.setdefault(rec["label"], {})[rec["broker"]] = rec
    rows = []
    for label, brokers in by_label.items():
        ref = brokers.get(reference)
        if ref is None:
            continue
        for name, other in brokers.items():
            if name == reference:
                continue
            row = {"label": label, "reference": reference, "other": name}
            for m in METRICS:
                a, b = metric(ref, m), metric(other, m)
                row[m] = (a / b) if isinstance(a, (int, float)) and isinstance(
                    b, (int, float)) and b else None
            rows.append(row)
    return rows


def format_ratios(rows) -> str:
    shown = ("delivered_rate", "publish_rate", "latency_p50_ms", "latency_p99_ms",
             "broker_cpu_s", "connects_per_s", "rss_per_1000_mib")
    lines = []
    for row in rows:
        parts = [f"{m}={row[m]:.3g}x" for m in shown if row.get(m) is not None]
        lines.append(f"{row['label']}: {row['reference']} / {row['other']}: "
                     + (" ".join(parts) or "no comparable metric"))
    return "\n".join(lines)


def _md_cell(rec: dict | None) -> str:
    if rec is None:
        return "-"
    if rec.get("error") and rec.get("sent") is None:
        return rec["error"].split("\n")[0]
    if rec.get("scenario") == "storm":
        mib, cps = rec.get("rss_per_1000_mib"), rec.get("connects_per_s")
        return f"{mib:.2f} MiB/1000, {cps:,.0f} conn/s" if mib is not None and cps else "-"
    lat = rec.get("latency_ms") or {}
    if rec.get("scenario") == "latency":
        text = f"p50 {lat.get('p50', 0):.2f} ms, p99 {lat.get('p99', 0):.2f} ms"
    else:
        rate = rec.get("delivered_rate")
        text = "-" if rate is None else f"{rate:,.0f} msgs/s"
    return f"{text}, lost {rec.get('lost')}"


def _md_ratio(ref: dict | None, other: dict | None) -> str:
    if ref is None or other is None or (other.get("error") and other.get("sent") is None):
        return "-"
    if ref.get("scenario") == "storm":
        m = [metric(r, "rss_per_1000_mib") for r in (ref, other)]
        c = [metric(r, "connects_per_s") for r in (ref, other)]
        if None in m or None in c or not m[1] or not c[1]:
            return "-"
        return f"{m[0] / m[1]:.2f}x memory, {c[0] / c[1]:.2f}x conn/s"
    name = "latency_p99_ms" if ref.get("scenario") == "latency" else "delivered_rate"
    a, b = metric(ref, name), metric(other, name)
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not b:
        return "-"
    return f"{a / b:.2f}x p99" if name == "latency_p99_ms" else f"{a / b:.2f}x"


def markdown_table(records, reference: str) -> str:
    """The README's Performance table for ``records`` (see the module docstring)."""
    labels: dict[str, dict[str, dict]] = {}
    order: list[str] = []
    for rec in records:
        by = labels.setdefault(rec["label"], {})
        by[rec["broker"]] = rec
        if rec["broker"] not in order:
            order.append(rec["broker"])
    others = [b for b in order if b != reference]
    head = ["scenario", *order, *(f"{reference} / {o}" for o in others)]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for label, by in labels.items():
        any_rec = next(iter(by.values()))
        cells = [f"{label} {any_rec.get('scenario', '')}"]
        cells += [_md_cell(by.get(b)) for b in order]
        cells += [_md_ratio(by.get(reference), by.get(o)) for o in others]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def format_record(rec: dict) -> str:
    if not rec["ok"] and rec.get("sent") is None:
        return f"{rec['label']}@{rec['broker']}: FAILED: {rec['error']}"
    lat = rec.get("latency_ms") or {}

    def num(v, fmt=".0f"):
        return "-" if v is None else format(v, fmt)
    text = (f"{rec['label']}@{rec['broker']}: sent {rec['sent']} "
            f"delivered {rec['delivered']} lost {rec['lost']} dup {rec['duplicated']} "
            f"ooo {rec['out_of_order']} | pub {num(rec['publish_rate'])}/s "
            f"deliv {num(rec['delivered_rate'])}/s | latency ms p50 {num(lat.get('p50'), '.3f')} "
            f"p99 {num(lat.get('p99'), '.3f')} max {num(lat.get('max'), '.3f')} "
            f"| broker cpu {num(rec['broker_cpu_s'], '.2f')}s "
            f"rss {num(rec['broker_rss_peak_mib'], '.1f')}MiB "
            f"| gen cpu {num(rec['generator_cpu_s'], '.2f')}s")
    if rec["scenario"] == "storm":
        text += (f" | {rec['connections']} conns {num(rec['connects_per_s'])}/s "
                 f"{num(rec['rss_per_1000_mib'], '.2f')} MiB/1000")
    if not rec["ok"]:
        text += f" | NOT OK: {rec['error']}"
    return text


def _charts(label: str, recs: list[dict], out: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in label)
    with_series = [r for r in recs if (r.get("series") or {}).get("delivered")]
    if with_series:
        fig, ax = plt.subplots(figsize=(7, 3.5))
        for n, r in enumerate(with_series):
            width = r["series"]["bucket_s"]
            for key, style in (("delivered", "-"), ("published", ":")):
                counts = r["series"][key]
                # one point per bucket, drawn at its centre; markers keep a
                # run shorter than one bucket visible
                ax.plot([(i + 0.5) * width for i in range(len(counts))],
                        [c / width for c in counts], style, marker=".",
                        color=f"C{n}", label=f"{r['broker']} {key}")
        ax.set_xlabel("seconds since start")
        ax.set_ylabel("messages / s")
        ax.set_title(f"{label}: throughput over time")
        ax.legend(fontsize="small")
        fig.tight_layout()
        name = f"{safe}-throughput.png"
        fig.savefig(out / name, dpi=90)
        plt.close(fig)
        files.append(name)
    with_lat = [r for r in recs if (r.get("latency_ms") or {}).get("cdf")]
    if with_lat:
        fig, ax = plt.subplots(figsize=(7, 3.5))
        for n, r in enumerate(with_lat):
            ax.plot(r["latency_ms"]["cdf"], range(101), color=f"C{n}", label=r["broker"])
        ax.set_xscale("log")
        ax.set_xlabel("latency, ms (log)")
        ax.set_ylabel("percentile")
        ax.set_title(f"{label}: latency CDF")
        ax.legend(fontsize="small")
        fig.tight_layout()
        name = f"{safe}-latency.png"
        fig.savefig(out / name, dpi=90)
        plt.close(fig)
        files.append(name)
    return files


_COLUMNS = ("broker", "ok", "sent", "delivered", "lost", "duplicated", "out_of_order",
            "publish_rate", "delivered_rate", "latency_p50_ms", "latency_p99_ms",
            "latency_max_ms", "broker_cpu_s", "broker_rss_peak_mib", "connects_per_s",
            "rss_per_1000_mib", "generator_cpu_s", "error")


def _cell(rec, col) -> str:
    v = rec.get(col) if col in ("broker", "ok", "error") else metric(rec, col)
    if isinstance(v, float):
        return f"{v:,.3f}" if v < 100 else f"{v:,.0f}"
    return html.escape("" if v is None else str(v))


def write_html(records, out: Path, *, reference: str | None = None,
               title: str = "mqgate load test") -> Path:
    out.mkdir(parents=True, exist_ok=True)
    by_label: dict[str, list[dict]] = {}
    for rec in records:
        by_label.setdefault(rec["label"], []).append(rec)
    parts = [f"<!doctype html><meta charset=utf-8><title>{html.escape(title)}</title>",
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}</style>",
             f"<h1>{html.escape(title)}</h1>"]
    for label, recs in by_label.items():
        params = recs[0]["params"]
        parts.append(f"<h2>{html.escape(label)} ({html.escape(recs[0]['scenario'])})</h2>")
        parts.append("<p><code>" + html.escape(json.dumps(params, sort_keys=True))
                     + "</code></p>")
        parts.append("<table><tr>" + "".join(f"<th>{c}</th>" for c in _COLUMNS) + "</tr>")
        for r in recs:
            parts.append("<tr>" + "".join(f"<td>{_cell(r, c)}</td>" for c in _COLUMNS)
                         + "</tr>")
        parts.append("</table>")
        if reference:
            rows = [r for r in ratios(recs, reference)]
            if rows:
                parts.append("<pre>" + html.escape(format_ratios(rows)) + "</pre>")
        for name in _charts(label, recs, out):
            parts.append(f'<p><img src="{name}" alt="{html.escape(name)}"></p>')
    path = out / "report.html"
    path.write_text("\n".join(parts) + "\n")
    return path
