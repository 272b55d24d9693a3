"""``specwatch gate``: the release gate, baseline against candidate on matched traffic
(``monitor/gate``, docs/gate.md). Exit 0 pass, 1 fail, 3 insufficient data, 2 usage error."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from monitor.config import Config
from monitor.exceptions import SpecwatchError
from monitor.times import parse_time_arg


class GateUsageError(SpecwatchError):
    """A gate asked for something it cannot answer (since after until)."""


def cmd_gate(args: argparse.Namespace, config: Config) -> int:
    from monitor.gate import GateSettings, change_sides, experiment_sides, judge_gate
    from monitor.gate.text import format_gate
    from monitor.store.store import Store

    if args.since is not None and args.until is not None and args.since > args.until:
        raise GateUsageError(f"--since {args.since.isoformat()} is after --until "
                             f"{args.until.isoformat()}")
    settings = GateSettings.from_config(config.gate)
    with Store(config.store.url) as store:
        if args.experiment is not None:
            sides = experiment_sides(store, args.experiment, args.since, args.until)
        else:
            sides = change_sides(store, args.change, window=config.detection.change_window,
                                 since=args.since, until=args.until)
    judgement = judge_gate(sides, settings)
    sys.stdout.write(format_gate(judgement, args.format))
    return judgement.exit_code


def register(sub: Any, with_config: Callable[[argparse.ArgumentParser], None],
             config: Callable[[argparse.Namespace], Config]) -> None:
    """Add ``gate`` to the ``specwatch`` parser."""
    p = sub.add_parser(
        "gate", help="release gate: baseline against candidate (an A/B experiment or a "
        "recorded change); exit 0 pass, 1 fail, 3 insufficient data",
        description="Pass only when the workload-weighted successful tasks per GPU-second do "
        "not fall by more than gate.efficiency_tolerance, no route carrying at least "
        "gate.min_route_share of the requests regresses on a critical metric (ok, "
        "schema_valid and tool_calls_valid rates, error rate, p99 e2e), and each configured "
        "latency class improves. The tests are always-valid: poll as often as you like. "
        "Exit codes: 0 pass, 1 fail, 3 insufficient data, 2 usage error. See docs/gate.md.")
    with_config(p)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--experiment", metavar="NAME",
                       help="the experiment whose arms baseline and candidate are compared")
    which.add_argument("--change", metavar="ID",
                       help="a recorded change (specwatch changes): the replaced setup "
                       "against the new one on its route")
    p.add_argument("--since", type=parse_time_arg,
                   help="from (inclusive): RFC 3339 time or a duration ago (30d)")
    p.add_argument("--until", type=parse_time_arg,
                   help="to (exclusive): RFC 3339 time or a duration ago")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.set_defaults(func=lambda args: cmd_gate(args, config(args)))
