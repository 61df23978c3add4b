"""The campaign's HTML page: its figures as tables, its series as PNG plots (matplotlib, Agg).

Rules it keeps: the page is built from report.json's dict alone (so it can
be rebuilt from a saved report); every plot is a file next to index.html;
values are escaped.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _plot(path: Path, title: str, xs, series: dict[str, list], xlabel: str) -> str:
    fig, axes = plt.subplots(len(series), 1, figsize=(8, 2.2 * len(series)), sharex=True, squeeze=False)
    for ax, (name, ys) in zip(axes[:, 0], series.items()):
        pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="." if len(pts) < 60 else None)
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel(xlabel)
    axes[0, 0].set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path.name


def _table(d: dict) -> str:
    rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(json.dumps(v) if isinstance(v, (dict, list)) else str(v))}</td></tr>"
                   for k, v in d.items() if k not in ("rss_series", "samples", "rounds"))
    return f"<table>{rows}</table>"


def write_html(rep: dict, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    parts = [f"<h1>mqgate fault campaign</h1><p>started {html.escape(rep.get('started', ''))}, "
             f"{rep.get('seconds')} s; parameters {html.escape(json.dumps(rep.get('params', {})))}</p>"]
    fails = rep.get("failures", [])
    parts.append("<h2>Verdict</h2>" + ("<p class=ok>every check held</p>" if not fails else
                 "<ul>" + "".join(f"<li class=bad>{html.escape(f)}</li>" for f in fails) + "</ul>"))
    k = rep.get("kills")
    if k:
        rounds = k["rounds"]
        img = _plot(out / "kills.png", "kill rounds: recovery", [r["round"] for r in rounds],
                    {"ready s": [r["ready_s"] for r in rounds], "service s": [r["service_s"] for r in rounds],
                     "drain s": [r["drain_s"] for r in rounds]}, "round")
        parts.append("<h2>Kills under mixed load</h2>" + _table({x: k[x] for x in ("mqtt", "native", "timers", "transactions", "lost", "tracebacks", "seconds")})
                     + f"<img src='{img}'>" + _table({f"round {r['round']}": r for r in rounds}))
    f = rep.get("fuzz")
    if f:
        series = f["rss_series"]  # (s, frames, RSS KiB, anonymous KiB, file-backed KiB); (s, RSS KiB) before
        if series and len(series[0]) == 2:
            img = _plot(out / "fuzz.png", "fuzzing: server RSS", [s[0] for s in series],
                        {"RSS MiB": [s[1] / 1024 for s in series]}, "s")
        else:
            img = _plot(out / "fuzz.png", "fuzzing: server memory", [s[1] for s in series],
                        {"RSS MiB": [s[2] / 1024 for s in series], "anonymous MiB": [s[3] / 1024 for s in series],
                         "file-backed MiB": [s[4] / 1024 for s in series]}, "frames sent")
        parts.append("<h2>Fuzzing</h2>" + _table(f) + f"<img src='{img}'>")
    h = rep.get("hostile")
    if h:
        parts.append("<h2>Hostile clients</h2>" + _table(h))
    s = rep.get("soak")
    if s and s["samples"]:
        xs = [x["t"] / 60 for x in s["samples"]]
        img = _plot(out / "soak.png", "soak", xs, {k2: [x[k2] for x in s["samples"]] for k2 in
                                                 ("rss_mib", "rss_anon_mib", "fds", "p99_ms", "disk_mib", "delivered_per_s")}, "minutes")
        parts.append("<h2>Soak</h2>" + _table(s) + f"<img src='{img}'>")
    page = ("<!doctype html><meta charset=utf-8><title>mqgate fault campaign</title><style>"
            "body{font-family:sans-serif;max-width:60em;margin:auto}table{border-collapse:collapse;margin:1em 0}"
            "th,td{border:1px solid #ccc;padding:2px 6px;text-align:left;font-size:90%}.bad{color:#b00}.ok{color:#070}"
            "</style>" + "".join(parts))
    path = out / "index.html"
    path.write_text(page)
    return path
