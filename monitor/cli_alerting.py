"""``specwatch silence``, ``specwatch baseline`` and ``specwatch alerts``: the on-call's verbs.

They write to the store; the daemon picks silences and baseline requests up within seconds
(``CONTROL_EVERY_S`` in ``monitor/app.py``), so they work from any machine with the database
URL, whether or not a daemon runs there.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from monitor.config import RULE_NAMES, Config
from monitor.durations import parse_duration
from monitor.exceptions import SpecwatchError


def _iso(t: datetime | None) -> str:
    return "-" if t is None else t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no login name in some containers
        return "unknown"


def _duration(value: str) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError("a silence must last more than 0s")
    return seconds


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
              for r in rows]
    return "\n".join(lines) + "\n"


def _store(config: Config) -> Any:
    from monitor.store.store import Store

    return Store(config.store.url)


def cmd_silence(args: argparse.Namespace, config: Config) -> int:
    now = datetime.now(UTC)
    with _store(config) as store:
        alerting = store.alerting
        if args.silence_command == "add":
            if args.rule is not None and args.rule not in RULE_NAMES:
                raise SpecwatchError(f"unknown rule {args.rule!r} (known: {', '.join(RULE_NAMES)})")
            s = alerting.add_silence(args.route, args.rule, now, now + timedelta(seconds=args.for_),
                                     args.reason, args.by or _user(), now)
            print(f"silence {s.id}: route {s.route} rule {s.rule or '*'} until {_iso(s.ends_at)}"
                  f" ({s.reason})")
        elif args.silence_command == "expire":
            if not alerting.expire_silence(args.id, now):
                raise SpecwatchError(f"no silence {args.id} in force")
            print(f"silence {args.id} expired")
        else:
            silences = alerting.silences(active_at=None if args.all else now)
            if args.format == "json":
                for s in silences:
                    print(json.dumps(s.to_json(), ensure_ascii=False))
                return 0
            rows = [[str(s.id), s.route, s.rule or "*", _iso(s.starts_at), _iso(s.ends_at),
                     "active" if s.active(now) else ("ended" if s.ends_at <= now else "future"),
                     s.created_by, s.reason] for s in silences]
            sys.stdout.write(_table(rows, ["id", "route", "rule", "starts", "ends", "state",
                                           "by", "reason"]))
    return 0


def cmd_baseline(args: argparse.Namespace, config: Config) -> int:
    now = datetime.now(UTC)
    with _store(config) as store:
        alerting = store.alerting
        if args.baseline_command == "accept":
            rid = alerting.request_baseline(args.route, args.reason, args.by or _user(), now)
            print(f"baseline request {rid} for route {args.route}: the daemon that reads the "
                  f"route starts a new baseline within seconds (see: specwatch baseline list)")
        else:
            rows = [[str(r.id), r.route, _iso(r.requested_at), r.requested_by,
                     _iso(r.applied_at) if r.applied_at else "pending", r.applied_by or "-",
                     r.reason] for r in alerting.baseline_requests()]
            sys.stdout.write(_table(rows, ["id", "route", "requested", "by", "applied",
                                           "applied by", "reason"]))
    return 0


def cmd_alerts(args: argparse.Namespace, config: Config) -> int:
    with _store(config) as store:
        alerting = store.alerting
        states = None if args.all else ("pending", "firing", "resolving")
        episodes = alerting.episodes(states=states, route=args.route)
        pending = alerting.pending_stats()
    if args.format == "json":
        for e in episodes:
            print(json.dumps({k: (_iso(v) if isinstance(v, datetime) else v)
                              for k, v in e.items()}, ensure_ascii=False))
        return 0
    rows = [[e["route"], e["rule"], e["severity"], e["state"], _iso(e["started_at"]),
             _iso(e["resolved_at"]),
             "yes" if e["notified"] else ("silenced" if e["silenced_by"] else "no"),
             e["summary"][:100]] for e in episodes]
    sys.stdout.write(_table(rows, ["route", "rule", "severity", "state", "started", "resolved",
                                   "notified", "summary"]))
    if pending:
        print("undelivered: " + ", ".join(f"{sink} {n} (oldest {_iso(oldest)})"
                                          for sink, (n, oldest) in sorted(pending.items())))
    return 0


def register(sub: Any, with_config: Callable[[argparse.ArgumentParser], None],
             config: Callable[[argparse.Namespace], Config]) -> None:
    """Add the commands to the ``specwatch`` parser."""

    def bind(fn: Callable[[argparse.Namespace, Config], int]) -> Callable[..., int]:
        return lambda args: fn(args, config(args))

    p = sub.add_parser("silence", help="mute a route's alerts for a while")
    ssub = p.add_subparsers(dest="silence_command", required=True, metavar="ACTION")
    a = ssub.add_parser("add", help="add a silence")
    a.add_argument("--route", required=True, help="route name or glob (batch-*)")
    a.add_argument("--rule", help="only this rule (default: every rule of the route)")
    a.add_argument("--for", dest="for_", type=_duration, required=True, metavar="DURATION",
                   help="how long, e.g. 2h")
    a.add_argument("--reason", required=True)
    a.add_argument("--by", help="who (default: the login name)")
    with_config(a)
    a = ssub.add_parser("list", help="silences in force or to come (--all: every one)")
    a.add_argument("--all", action="store_true")
    a.add_argument("--format", choices=["table", "json"], default="table")
    with_config(a)
    a = ssub.add_parser("expire", help="end a silence now")
    a.add_argument("id", type=int)
    with_config(a)
    p.set_defaults(func=bind(cmd_silence))

    p = sub.add_parser("baseline", help="acknowledge an expected change on a route")
    bsub = p.add_subparsers(dest="baseline_command", required=True, metavar="ACTION")
    a = bsub.add_parser("accept", help="start a new baseline for a route")
    a.add_argument("--route", required=True)
    a.add_argument("--reason", default="expected change")
    a.add_argument("--by", help="who (default: the login name)")
    with_config(a)
    a = bsub.add_parser("list", help="baseline requests and whether they were applied")
    with_config(a)
    p.set_defaults(func=bind(cmd_baseline))

    p = sub.add_parser("alerts", help="alert episodes (active ones by default)")
    p.add_argument("--all", action="store_true", help="resolved and dropped episodes too")
    p.add_argument("--route")
    p.add_argument("--format", choices=["table", "json"], default="table")
    with_config(p)
    p.set_defaults(func=bind(cmd_alerts))
