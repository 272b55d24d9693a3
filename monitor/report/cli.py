"""``specwatch report``: one route's acceptance, alerts and latency as a self-contained page."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from monitor.config import Config
from monitor.report.options import GRANULARITIES
from monitor.times import parse_time_arg


def write_atomically(path: Path, content: str) -> None:
    """Write to a temporary file next to ``path`` and rename: a reader (a web server, a
    browser refreshing) never sees half a report."""
    # not mkstemp: its 0600 would make a report the web server cannot read
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as fh:
            fh.write(content)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def cmd_report(args: argparse.Namespace, config: Config) -> int:
    from monitor.changes import JudgeSettings
    from monitor.gate import GateSettings
    from monitor.report.data import gather_report
    from monitor.report.html import render_html
    from monitor.store.store import Store

    det = config.detection
    with Store(config.store.url) as store:
        report = gather_report(
            store, args.route, since=args.since, until=args.until,
            granularity=args.granularity, default_cutoff=det.breakeven_cutoff,
            idle_after=det.idle_pair_resolve, changes=JudgeSettings.from_config(det),
            price_per_gpu_hour=config.cost.price_per_gpu_hour,
            gate=GateSettings.from_config(config.gate), policy=config,
        )
    if report.empty:
        # No page at all: an empty report saved over last week's would look like a fix.
        print(f"specwatch: {report.no_data_message()}", file=sys.stderr)
        return 2
    page = render_html(report)
    if args.out == "-":
        sys.stdout.write(page)
        return 0
    out = Path(args.out)
    write_atomically(out, page)
    recs = ", ".join(f"{s.recommendation}" + (" (idle)" if s.idle else "")
                     for s in report.segments) or "none"
    print(f"report for route {args.route!r}: {len(report.pairs)} model pair(s), "
          f"{report.granularity} buckets, recommendations: {recs} -> {out}", file=sys.stderr)
    return 0


def register(sub: Any, with_config: Callable[[argparse.ArgumentParser], None],
             config: Callable[[argparse.Namespace], Config]) -> None:
    """Add ``report`` to the ``specwatch`` parser."""
    p = sub.add_parser("report", help="one route's acceptance, alerts, latency, setup "
                       "changes and recommendations as a self-contained HTML page")
    p.add_argument("--route", required=True)
    p.add_argument("--since", type=parse_time_arg, default="30d",
                   help="RFC 3339 time or a duration ago (default: 30d)")
    p.add_argument("--until", type=parse_time_arg, help="RFC 3339 time or a duration ago "
                   "(default: now)")
    p.add_argument("--granularity", choices=GRANULARITIES, default="auto",
                   help="bucket size of the time charts (default: minute for up to 12 h of "
                   "data, hour up to 60 days, then day)")
    p.add_argument("--out", default="report.html", metavar="PATH",
                   help="where the page goes, - for stdout (default: report.html)")
    with_config(p)
    p.set_defaults(func=lambda args: cmd_report(args, config(args)))
