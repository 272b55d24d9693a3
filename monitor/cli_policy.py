"""``specwatch policy``: where to speculate and how far, learnt from pre-request signals on an
earlier window and judged on a later one (``monitor/policy``, docs/policy.md). Exit 0, or 2
for a usage error (a hindsight feature, no data, a held-out window before the training one)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from monitor.config import Config
from monitor.times import parse_time_arg


def cmd_policy(args: argparse.Namespace, config: Config) -> int:
    from monitor.policy.features import parse_features
    from monitor.policy.learn import compute_policy
    from monitor.policy.render import format_policy
    from monitor.store.store import Store

    # a hindsight feature fails before the database is opened
    features = parse_features(args.features) if args.features is not None else None
    with Store(config.store.url) as store:
        result = compute_policy(store, config, route=args.route, train_since=args.train_since,
                                train_until=args.train_until,
                                holdout_until=args.holdout_until, features=features)
    sys.stdout.write(format_policy(result, args.format))
    return 0


def register(sub: Any, with_config: Callable[[argparse.ArgumentParser], None],
             config: Callable[[argparse.Namespace], Config]) -> None:
    """Add ``policy`` to the ``specwatch`` parser."""
    p = sub.add_parser(
        "policy", help="where to speculate and how far: a policy per slice of pre-request "
        "signals, judged on later held-out traffic, as a table, JSON, vLLM settings or a "
        "routing table",
        description="Learn, per route, model pair and slice of signals known before a request "
        "runs (tags, prompt length, temperature and batch-size buckets), whether to speculate "
        "and at which draft length, from the predicted decode speedup of every length; judge "
        "it on a later held-out window against all-on, all-off and per-route on/off. "
        "Hindsight fields (spec.*, output_tokens, latencies, status, outcome, itl_ms, "
        "output_hash) are refused. See docs/policy.md.")
    with_config(p)
    p.add_argument("--route", help="only this route")
    p.add_argument("--train-since", type=parse_time_arg, metavar="T",
                   help="training window start: RFC 3339 time or a duration ago (30d)")
    p.add_argument("--train-until", type=parse_time_arg, metavar="T",
                   help="training window end, and held-out window start (default: the last "
                   "policy.holdout_share of the data is held out)")
    p.add_argument("--holdout-until", type=parse_time_arg, metavar="T",
                   help="held-out window end (default: the end of the data)")
    p.add_argument("--features", metavar="LIST",
                   help="comma-separated: tags, tags.<key>, prompt_tokens, temperature, "
                   "batch_size (default: tags,batch_size; route and model pair always)")
    p.add_argument("--format", choices=["table", "json", "vllm", "routing"], default="table")
    p.set_defaults(func=lambda args: cmd_policy(args, config(args)))
