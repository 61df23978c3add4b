"""gateway/http/dashboard: the web dashboard, served by the one HTTP server.

Server-rendered pages (Jinja2, autoescaped) under ``/dashboard``, one
stylesheet and one small script shipped as package data: no build step, no
npm. ``run_http`` wires it::

    reads = DashboardReads(gw, broker_view)
    sampler = RateSampler(reads.counters)          # its run() goes in the HTTP server's nursery
    routes = Dashboard(ops, reads, users, sampler).routes()

Modules: ``charts`` (samples and SVG), ``reads`` (what the pages show
beyond the admin API), ``login`` (session cookie, CSRF), ``pages`` (routes, roles).
"""

from gateway.http.dashboard.charts import RateSampler, svg_chart
from gateway.http.dashboard.pages import Dashboard
from gateway.http.dashboard.reads import DashboardReads

__all__ = ["Dashboard", "DashboardReads", "RateSampler", "svg_chart"]
