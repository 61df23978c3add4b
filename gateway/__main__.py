"""`mqgate`: the command line. `serve` assembles the whole server.

Subcommands:
    serve      name server + broker + MQTT gateway in one process (the default)
    namesrv    the name server alone
    broker     a broker alone, registering with --namesrv
    gateway    an MQTT gateway node over the brokers of --namesrv (docs/CLUSTER.md)
    passwd     manage the MQTT password file (argon2 hashes); with --admin, the HTTP users file
    admin      topics, routes, groups, messages (over the native protocol); clients,
               sessions, retained messages, subscriptions (over the HTTP admin API)
    telemetry  the Spark telemetry job (runs `python -m spark.telemetry`)

`telemetry` is started as a separate Python process on purpose: `spark/` is a
room above `gateway/` and the gateway never imports it.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
import traceback
from pathlib import Path

from .config import ConfigError, build_serve_config, load_file
from .sys_topics import package_version


def version_line() -> str:
    """``mqgate 0.1.0 (kernels: compiled (18 modules))``: which build of the hot
    paths runs is part of the version a user reports."""
    from core import kernel_status

    return f"mqgate {package_version()} (kernels: {kernel_status()})"


def _add_serve_flags(p: argparse.ArgumentParser, *, mqtt: bool, namesrv: bool, broker: bool) -> None:
    p.add_argument("--config", metavar="FILE", help="TOML configuration file")
    p.add_argument("--data-dir", metavar="DIR", help="store root (default ./data)")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    if mqtt:
        p.add_argument("--mqtt-port", type=int, metavar="PORT", help="MQTT over TCP (default 1883; 0 = off)")
        p.add_argument("--ws-port", type=int, metavar="PORT", help="MQTT over WebSocket, path /mqtt (default 8083; 0 = off)")
        p.add_argument("--http-port", type=int, metavar="PORT",
                       help="HTTP: /metrics and the admin API (default 18083 on 127.0.0.1; 0 = off)")
        p.add_argument("--events-port", type=int, metavar="PORT",
                       help="HTTP event API: PutEvents and event rules (default 0 = off)")
    if namesrv:
        p.add_argument("--namesrv-port", type=int, metavar="PORT", help="name server (default 9876; 0 = off)")
    if broker and not mqtt:
        p.add_argument("--http-port", type=int, metavar="PORT",
                       help="HTTP /metrics of this broker (off unless given here or as [http] port)")
    if broker:
        p.add_argument("--broker-port", type=int, metavar="PORT", help="RocketMQ remoting (default 10911; 0 = off)")
        p.add_argument("--grpc-port", type=int, metavar="PORT",
                       help="RocketMQ 5 gRPC (5.x clients; default 8081; 0 = off)")
        p.add_argument("--flush", choices=("sync", "async"), help="flushDiskType: sync = SYNC_FLUSH, async = ASYNC_FLUSH (default)")
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING (default [log] level, else INFO)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mqgate", description="MQTT 3.1.1/5.0 gateway and RocketMQ-style broker.",
                                     epilog="Configuration keys: docs/CONFIG.md; admin verbs: docs/ADMIN.md.")
    parser.add_argument("--version", action="version", version=version_line())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("serve", help="name server + broker + MQTT gateway in one process",
                       description="Name server, broker and MQTT gateway in one process. Flags override the "
                                   "--config file; every key of that file is in docs/CONFIG.md.")
    _add_serve_flags(p, mqtt=True, namesrv=True, broker=True)
    p.add_argument("--namesrv", metavar="ADDRS", help="extra name servers to register with, host:port;host:port")
    p = sub.add_parser("namesrv", help="run the name server alone", description="The name server alone.")
    _add_serve_flags(p, mqtt=False, namesrv=True, broker=False)
    p = sub.add_parser("broker", help="run a broker alone",
                       description="A broker alone (any brokerRole: docs/HA.md), registering with --namesrv. "
                                   "Configuration keys: docs/CONFIG.md.")
    _add_serve_flags(p, mqtt=False, namesrv=False, broker=True)
    p.add_argument("--namesrv", metavar="ADDRS", help="name servers, host:port;host:port")
    p = sub.add_parser("gateway", help="an MQTT gateway node in front of brokers (no store of its own)",
                       description="An MQTT gateway node: the MQTT edge of serve, over the brokers that the "
                                   "name servers route to; run several for one cluster (docs/CLUSTER.md).")
    _add_serve_flags(p, mqtt=True, namesrv=False, broker=False)
    p.add_argument("--namesrv", metavar="ADDRS", help="name servers, host:port;host:port")
    p.add_argument("--etcd", metavar="ENDPOINTS",
                   help="etcd client URLs http://h:p;http://h:p: one owner node per client id, held in etcd "
                        "(default [broker] etcdEndpoints; none = the meta records' order decides)")
    sub.add_parser("passwd", help="manage the password file", add_help=False)
    sub.add_parser("admin", help="administration over the native protocol", add_help=False)
    sub.add_parser("telemetry", help="Spark telemetry aggregation job", add_help=False)
    return parser


def _setup_logging(cfg) -> None:
    from .logs import LogSettings, setup_logging

    settings = LogSettings.from_dict(cfg.log, level_flag=cfg.log_level_flag)  # ConfigError: exit 2
    if settings.file:
        os.makedirs(os.path.dirname(os.path.abspath(settings.file)), exist_ok=True)
    setup_logging(settings)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        argv = ["serve"]
    command, rest = argv[0], argv[1:]
    if command == "passwd":
        if "--admin" in rest:
            from .http.users import passwd_admin_main

            return passwd_admin_main(rest)
        from .auth import passwd_main

        return passwd_main(rest)
    if command == "admin":
        from .http.cli import admin_area, http_admin_main, is_http_verb

        if admin_area(rest) == "events":
            from .http.events_cli import events_admin_main

            return events_admin_main(rest)
        if is_http_verb(rest):
            return http_admin_main(rest)
        from core.admin import admin_main

        return admin_main(rest)
    if command == "telemetry":
        missing = [m for m in ("pyspark", "pyarrow") if importlib.util.find_spec(m) is None]
        if missing:  # one line, not spark.telemetry's ImportError traceback
            print(f"mqgate telemetry: {' and '.join(missing)} not installed: it needs the Spark extra, "
                  f"pip install 'mqgate[spark]' (make run installs it)", file=sys.stderr)
            return 1
        os.execv(sys.executable, [sys.executable, "-m", "spark.telemetry", *rest])

    args = build_parser().parse_args(argv)
    flags = {k: v for k, v in vars(args).items() if k not in ("command", "config", "log_level", "etcd")}
    try:
        file_data = load_file(args.config) if args.config else None
        cfg = build_serve_config(file_data, flags)
        cfg.config_file = Path(args.config) if args.config else None
        cfg.log_level_flag = args.log_level
        _setup_logging(cfg)
    except ConfigError as e:
        print(f"mqgate: {e}", file=sys.stderr)
        return 2
    if args.command == "namesrv":
        cfg.mqtt_port = cfg.ws_port = cfg.broker_port = 0
    elif args.command == "broker":
        cfg.mqtt_port = cfg.ws_port = cfg.namesrv_port = 0
    elif args.command == "gateway":
        from .gateway_node import run_gateway_node

        try:
            return run_gateway_node(cfg, args.namesrv, args.etcd)
        except ConfigError as e:
            print(f"mqgate: {e}", file=sys.stderr)
            return 2

    from .serve import run_server
    from .startup import explain

    try:
        return run_server(cfg, role=args.command)
    except Exception as e:  # one line for a person; the traceback only at DEBUG
        if logging.getLogger().isEnabledFor(logging.DEBUG):
            traceback.print_exception(e)
        line, status = explain(e, cfg)
        print(f"mqgate: {line}", file=sys.stderr)
        return status


if __name__ == "__main__":
    sys.exit(main())
