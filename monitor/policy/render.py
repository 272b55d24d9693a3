"""A policy as text: a readable table, JSON, vLLM ``speculative_config`` per model pair, or a
YAML routing table for a gateway (``specwatch policy --format``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from monitor.policy.features import parse_tag_slice
from monitor.policy.result import PairSchedule, PolicyResult, SliceDecision

__all__ = ["FORMATS", "MAX_BATCH", "format_policy", "routing_table", "vllm_configs",
           "vllm_k_for", "vllm_schedule"]

FORMATS = ("table", "json", "vllm", "routing")
MAX_BATCH = 4096
"""Upper end of the last emitted batch range (vLLM's schedules are closed ranges)."""


def format_policy(result: PolicyResult, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(result.to_json(), indent=2) + "\n"
    if fmt == "vllm":
        return json.dumps(vllm_configs(result), indent=2) + "\n"
    if fmt == "routing":
        return yaml.safe_dump(routing_table(result), sort_keys=False, width=4096)
    if fmt == "table":
        return _table(result)
    raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")


# -- vLLM ------------------------------------------------------------------------------------


def vllm_schedule(schedule: PairSchedule) -> list[list[int]]:
    """``num_speculative_tokens_per_batch_size`` as vLLM validates it: a list of inclusive
    ``[bs_lo, bs_hi, K]`` ranges, sorted, the first starting at 1. Each covered bucket gets
    its own K; a gap between covered buckets the smaller neighbour's K; below the lowest
    covered bucket its K; above the highest a range up to :data:`MAX_BATCH` at 0 (a larger
    batch only makes verification dearer). The open last bucket (``256+``) ends at MAX_BATCH.

    vLLM (``vllm/v1/spec_decode/dynamic/utils.py``) rejects any other shape: a dict of
    ``"lo-hi"`` keys, as some write-ups show, does not load.
    """
    out: list[list[int]] = []
    buckets = sorted(schedule.buckets, key=lambda b: b.lo)
    if not buckets:
        return out
    first = buckets[0]
    if first.lo > 1:
        out.append([1, first.lo - 1, first.num_speculative_tokens])
    for i, b in enumerate(buckets):
        hi = MAX_BATCH if b.hi is None else min(b.hi, MAX_BATCH)
        out.append([b.lo, hi, b.num_speculative_tokens])
        nxt = buckets[i + 1] if i + 1 < len(buckets) else None
        if nxt is not None and nxt.lo > hi + 1:
            out.append([hi + 1, nxt.lo - 1, min(b.num_speculative_tokens,
                                                nxt.num_speculative_tokens)])
        if nxt is None and hi < MAX_BATCH:
            out.append([hi + 1, MAX_BATCH, 0])
    return out


def vllm_configs(result: PolicyResult) -> list[dict[str, Any]]:
    """One ``{"target", "draft", "speculative_config"}`` per model pair, for
    ``vllm serve --speculative-config``. ``num_speculative_tokens`` is the largest K of the
    schedule (vLLM's buffer size and clamp); a pair that should never speculate gets
    ``"speculative_config": null`` (vLLM refuses a schedule with ``num_speculative_tokens``
    0: run without ``--speculative-config``)."""
    out = []
    for sched in result.schedules:
        per_batch = vllm_schedule(sched)
        top = max((k for _, _, k in per_batch), default=0)
        cfg: dict[str, Any] | None = None
        if top > 0:
            cfg = {}
            if sched.pair.method:
                cfg["method"] = sched.pair.method
            if sched.pair.draft_model:
                cfg["model"] = sched.pair.draft_model
            cfg["num_speculative_tokens"] = top
            cfg["num_speculative_tokens_per_batch_size"] = per_batch
        p = sched.pair
        out.append({"target": f"{p.target_model}@{p.target_revision}" if p.target_revision
                    else p.target_model,
                    "draft": f"{p.draft_model}@{p.draft_revision}" if p.draft_revision
                    else p.draft_model,
                    "speculative_config": cfg})
    return out


def vllm_k_for(schedule: Sequence[Sequence[int]] | Mapping[str, int],
               num_speculative_tokens: int, batch: int) -> int:
    """The draft length vLLM schedules at ``batch``, read as vLLM does
    (``build_dynamic_sd_schedule_lookup``): inclusive ``[lo, hi, K]`` ranges, non-overlapping,
    the first starting at 1; a batch in a gap or above the last range inherits the previous
    range's K; every K clamped to ``num_speculative_tokens``. A ``{"lo-hi": K}`` mapping (the
    form some documentation shows) is read the same way.

    >>> s = [[1, 16, 3], [64, 128, 2], [256, 4096, 0]]
    >>> [vllm_k_for(s, 3, b) for b in (1, 16, 17, 63, 64, 200, 256, 9999)]
    [3, 3, 3, 3, 2, 2, 0, 0]
    >>> vllm_k_for({"1-8": 5}, 2, 4)
    2
    """
    items = ([(*key.split("-", 1), k) for key, k in schedule.items()]
             if isinstance(schedule, Mapping) else schedule)
    ranges = sorted((int(lo), int(hi), int(k)) for lo, hi, k in items)
    if not ranges or ranges[0][0] != 1:
        raise ValueError("the first batch-size range must start at 1")
    prev_end = 0
    for lo, hi, _ in ranges:
        if lo <= prev_end or lo > hi:
            raise ValueError("batch-size ranges must be non-overlapping and sorted")
        prev_end = hi
    k = ranges[0][2]
    for lo, hi, rk in ranges:
        if batch < lo:
            break
        k = rk  # inside the range, or past it (a gap or the end inherits it)
        if batch <= hi:
            break
    return min(k, num_speculative_tokens)


# -- routing ---------------------------------------------------------------------------------


def _setting(d: SliceDecision) -> dict[str, Any]:
    return {"speculate": d.speculate, "num_speculative_tokens": d.num_speculative_tokens}


def routing_table(result: PolicyResult) -> dict[str, Any]:
    """Route and slice -> speculation on/off and draft length, for a gateway."""
    routes = []
    for rd in sorted(result.routes, key=lambda d: (d.route, d.pair)):
        slices = []
        for d in result.slices:
            if d.route != rd.route or d.pair != rd.pair or not d.features:
                continue
            match: dict[str, Any] = {}
            entry: dict[str, Any] = {}
            for name, value in d.features:
                if name == "tags":
                    match["tags"] = parse_tag_slice(value) if value != "*" else "*"
                elif name.startswith("tags."):
                    # None: the request carries no such tag
                    match.setdefault("tags", {})[name[5:]] = value or None
                elif name == "batch_size":
                    entry["batch"] = value.replace("+", "-4096") if value.endswith("+") \
                        else value
                else:
                    match[name] = value
            slices.append({"match": match, **entry, **_setting(d), "decided_by": d.decided_by})
        routes.append({"route": rd.route, "pair": rd.pair.label, "default": _setting(rd),
                       "slices": slices})
    return {"version": 1, "train": result.train.to_json(), "routes": routes}


# -- table -----------------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _iv(iv: tuple[float, float] | None, fmt: str = "{:.2f}") -> str:
    return "" if iv is None else "[" + fmt.format(iv[0]) + ", " + fmt.format(iv[1]) + "]"


def _table(r: PolicyResult) -> str:
    tw = r.train.to_json()
    lines = [f"policy over {tw['since']} .. {tw['until']} ({tw['hours']} h), features: "
             f"{', '.join(r.features) or '(route and pair only)'}"]
    lines.append("")
    lines.append("costs (marginal cost m = c + v per drafted position, in plain target steps; "
                 "it is also the break-even acceptance rate):")
    for c in r.costs:
        iv = f" {_iv(c.interval, '{:.3f}')}" if c.interval else ""
        lines.append(f"  {c.target_model}@{c.target_revision} <- {c.draft_model or '-'}  "
                     f"batch {c.batch:>8}  m={c.m:.3f}{iv}  {c.source}")
    lines.append("")
    lines.append("slices (setting: K = draft length, 0 = off; T(j) = predicted speedup):")
    group = None
    for d in r.slices:
        if (d.route, d.pair) != group:
            group = (d.route, d.pair)
            lines.append(f"  {d.route}  {d.pair.label}")
        feats = " ".join(f"{k}={v or '-'}" for k, v in d.features) or "(all)"
        setting = f"K={d.num_speculative_tokens}" if d.speculate else "off"
        if None in d.speedups:
            # without per-position counts only the measured length has a prediction
            known = " ".join(f"T({j})={t:.2f}" for j, t in enumerate(d.speedups)
                             if t is not None)
            curve = f"{known} (no per-position counts)"
        else:
            curve = "T(0..{})={}".format(d.measured_length,
                                         " ".join(f"{t:.2f}" for t in d.speedups))
        lines.append(f"    {feats:<40} {setting:<5} {d.decided_by:<6} "
                     f"n={d.requests:<7} acc={_pct(d.acceptance):>4}  {curve}")
        if d.decided_by == "parent":
            lines.append(f"      {d.reason}")
    lines.append("")
    lines.append("per pair and batch bucket (pooled over routes and tags; what --format vllm "
                 "writes):")
    for sched in r.schedules:
        lines.append(f"  {sched.pair.label}")
        for b in sched.buckets:
            k = b.num_speculative_tokens
            t = b.speedups[k] if k < len(b.speedups) and b.speedups[k] is not None else 1.0
            lines.append(f"    batch {b.batch:>8}  break-even {b.marginal_cost:.3f}  "
                         f"K={k}  T(K)={t:.2f}  n={b.requests}")
    lines.append("")
    h = r.holdout
    if h is None:
        lines.append(f"held out: {r.holdout_note or 'none'}")
    else:
        hw = h.window.to_json()
        lines.append(f"held out {hw['since']} .. {hw['until']} ({hw['hours']} h, "
                     f"{h.requests} requests): decode speedup over no speculation")
        for s in h.strategies:
            lines.append(f"  {s.name:<10} {s.goodput:.3f}x {_iv(s.interval, '{:.3f}')}")
        for c in h.comparisons:
            verdict = ("better" if c.better else "not shown better"
                       if c.interval is not None else "no interval")
            lines.append(f"  policy - {c.against:<10} {c.difference:+.3f} "
                         f"{_iv(c.interval, '{:+.3f}')} {verdict}")
        if h.note.startswith("only"):
            lines.append(f"  {h.note}")
        unstable = [c for c in h.slices if c.unstable]
        lines.append(f"  unstable slices (acceptance moved beyond its interval): "
                     f"{len(unstable) if unstable else 'none'} of {len(h.slices)}")
        for c in unstable:
            lines.append(f"    {c.id}: {_pct(c.predicted)} -> {_pct(c.realized)}")
    lines.append("")
    lines.append("what each route gains:")
    for g in r.gains:
        lines.append(f"  {g.route:<16} {g.note}")
    return "\n".join(lines) + "\n"
