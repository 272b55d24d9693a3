"""``specwatch changes``: every setup change on a route, judged against the setup it replaced
(``monitor/changes``): per metric better, worse, same or insufficient data, with intervals,
and one verdict per change."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from monitor.config import Config
from monitor.times import parse_time_arg


def cmd_changes(args: argparse.Namespace, config: Config) -> int:
    from monitor.changes import JudgeSettings, judge_changes
    from monitor.changes.text import format_changes
    from monitor.store.store import Store

    settings = JudgeSettings.from_config(config.detection)
    with Store(config.store.url) as store:
        judged = judge_changes(store, route=args.route, since=args.since, settings=settings)
    sys.stdout.write(format_changes(judged, args.format))
    return 0


def register(sub: Any, with_config: Callable[[argparse.ArgumentParser], None],
             config: Callable[[argparse.Namespace], Config]) -> None:
    """Add ``changes`` to the ``specwatch`` parser."""
    p = sub.add_parser(
        "changes", help="setup changes per route (target or draft revision, draft length, "
        "speculation on/off) judged before and after",
        description="Each change on a route compared with the setup it replaced, over "
        "detection.change_window on each side (default 6h): acceptance, mean accepted "
        "length, decode throughput, TTFT and e2e latency, error rate; per metric better, "
        "worse, same or insufficient_data with a 95%% interval, and one verdict per change.")
    with_config(p)
    p.add_argument("--route", help="only this route")
    p.add_argument("--since", type=parse_time_arg,
                   help="changes at or after: RFC 3339 time or a duration ago (30d)")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.set_defaults(func=lambda args: cmd_changes(args, config(args)))
