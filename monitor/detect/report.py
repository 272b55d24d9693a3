"""Human-readable lines for the per-segment recommendations."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def recommendation_lines(recs: Iterable[dict[str, Any]]) -> list[str]:
    """One line per segment: the decision first, then the evidence behind it.

    >>> recommendation_lines([{"labels": {"route": "code", "draft_model": "d",
    ...     "target_model": "t", "num_speculative_tokens": "5"}, "recommendation": "on",
    ...     "recommended_num_speculative_tokens": 4, "evidence": {"rate": 0.8, "low": 0.78,
    ...     "high": 0.82, "cutoff": 0.4, "requests": 900, "drafted_tokens": 50000}}])
    ['speculation on  code  d -> t k=5  acceptance 0.800 [0.780, 0.820] vs cutoff 0.40, 900 requests, 50000 drafted tokens; knee at k=4']
    """
    out = []
    for r in recs:
        lab, ev = r["labels"], r["evidence"]
        rate = ev.get("rate")
        pair = f"{lab.get('draft_model') or lab.get('method') or 'none'} -> {lab['target_model']}"
        line = (
            f"speculation {r['recommendation']:<4} {lab['route']}  {pair} "
            f"k={lab['num_speculative_tokens']}"
        )
        if rate is not None:
            line += (
                f"  acceptance {rate:.3f} [{ev.get('low', float('nan')):.3f}, "
                f"{ev.get('high', float('nan')):.3f}] vs cutoff {ev.get('cutoff', 0):.2f}, "
                f"{ev.get('requests', 0)} requests, {ev.get('drafted_tokens', 0)} drafted tokens"
            )
        if r.get("recommended_num_speculative_tokens"):
            line += f"; knee at k={r['recommended_num_speculative_tokens']}"
        out.append(line)
    return out
