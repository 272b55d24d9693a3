"""What a route gains from its policy: the share of its end-to-end time spent decoding, and
the predicted e2e saving per request against no speculation.

An approximation from means, not a percentile model: the mean decode time per timed request
at the settings the traffic ran, times the speedup it ran at (``T_observed``), is the decode
time without speculation; the policy's speedup ``T_policy`` saves ``decode_nospec * (1 -
1 / T_policy)`` of it. A route whose decode is under 30% of e2e is waiting on prefill or
retrieval: a faster decode will not be felt.

>>> decode_saving(mean_decode_ms=400.0, observed=1.25, policy=2.0)
250.0
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from monitor.policy.predict import Evidence, harmonic_speedup
from monitor.policy.result import RouteGain, SliceDecision
from monitor.policy.slices import SliceRecord

__all__ = ["DECODE_BOUND_SHARE", "decode_saving", "route_gains"]

DECODE_BOUND_SHARE = 0.3
"""Below this share of e2e spent decoding, a route is called prefill- or retrieval-bound."""


def decode_saving(mean_decode_ms: float, observed: float, policy: float) -> float:
    """Milliseconds saved per request by the policy against no speculation."""
    return mean_decode_ms * observed * (1.0 - 1.0 / policy)


def route_gains(records: Iterable[SliceRecord], slices: Mapping[tuple, Evidence],
                decisions: Mapping[tuple, SliceDecision]) -> tuple[RouteGain, ...]:
    timed: dict[str, int] = defaultdict(int)
    decode: dict[str, float] = defaultdict(float)
    e2e: dict[str, float] = defaultdict(float)
    spec_timed: dict[str, int] = defaultdict(int)
    spec_decode: dict[str, float] = defaultdict(float)
    for rec in records:
        st, route = rec.stats, rec.series.route
        timed[route] += st.timed_requests
        decode[route] += st.decode_ms
        e2e[route] += st.e2e_ms
        if rec.series.num_speculative_tokens > 0:
            spec_timed[route] += st.timed_requests
            spec_decode[route] += st.decode_ms
    observed: dict[str, list[tuple[float, float]]] = defaultdict(list)
    chosen: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for sid, ev in slices.items():
        tot = ev.total()
        if all(t is None for t in tot.speedups()[1:]):
            continue  # nothing predicted: no saving to claim either way
        observed[sid[0]].append((tot.output_tokens, tot.speedup_at(tot.length)))
        dec = decisions.get(sid)
        j = dec.num_speculative_tokens if dec is not None else 0
        chosen[sid[0]].append((tot.output_tokens, tot.speedup_at(j)))
    out = []
    for route in sorted(set(timed) | set(observed)):
        share = decode[route] / e2e[route] if e2e[route] > 0 else None
        mean_e2e = e2e[route] / timed[route] if timed[route] else None
        mean_decode = spec_decode[route] / spec_timed[route] if spec_timed[route] else None
        t_obs = harmonic_speedup(observed[route])
        t_pol = harmonic_speedup(chosen[route])
        saving = None
        if mean_decode is not None and t_obs is not None and t_pol is not None:
            saving = decode_saving(mean_decode, t_obs, t_pol)
        bound = None if share is None else share >= DECODE_BOUND_SHARE
        if share is None:
            note = "no timed requests (ttft_ms and e2e_ms): the saving cannot be estimated"
        elif not bound:
            note = (f"prefill- or retrieval-bound: decode is {share:.0%} of e2e, a faster "
                    "decode will not be felt")
        elif saving is None and mean_decode is not None:
            note = (f"decode is {share:.0%} of e2e; the speedup cannot be predicted (no "
                    "verification steps or per-position counts reported)")
        elif saving is None:
            note = f"decode is {share:.0%} of e2e; no timed speculative requests"
        else:
            note = (f"decode is {share:.0%} of e2e; the policy saves about {saving:.0f} ms per "
                    "request against no speculation (from mean decode times)")
        out.append(RouteGain(route=route, timed_requests=timed[route], decode_share=share,
                             mean_e2e_ms=mean_e2e, mean_decode_ms=mean_decode,
                             speedup_observed=t_obs, speedup_policy=t_pol, saving_ms=saving,
                             decode_bound=bound, note=note))
    return tuple(out)
