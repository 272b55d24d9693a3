"""Per-request numbers of one route: lengths, acceptance chains, status and latency.

Everything is drawn for a whole chunk of requests at once. Two generators per route keep
incidents from reshuffling the traffic: ``fixed`` draws the same amount of randomness per
request whatever the parameters (uniforms, normals), so prompts, lengths, statuses and
instances of a request are the same with and without an incident; ``chain`` draws what
depends on parameters (Beta acceptance, binomial chains, Poisson batch sizes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from monitor.simulate.acceptance import calibrated_mean, engine_rate
from monitor.simulate.effects import Conditions
from monitor.simulate.profiles import RouteProfile

STATUSES = ("ok", "error", "timeout", "cancelled")
_ERROR_KINDS = np.array([0.55, 0.85])  # cumulative: error 55 %, timeout 30 %, cancelled 15 %
_ERROR_OUTPUT_MEAN = 12.0  # failed requests stop early: a few tokens at most
_PREFILL_BASE_MS = 20.0


def batch_factor(batch: np.ndarray) -> np.ndarray:
    """Step cost relative to batch size 1: a decode step slows as the batch fills."""
    return 1.0 + (batch - 1.0) / 32.0


@dataclass
class Requests:
    """Arrays for n requests of one route (``per_position`` is n x max(k); a request's
    positions past its own ``k`` are 0)."""

    status: np.ndarray  # index into STATUSES
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    drafting: np.ndarray  # speculation proposed tokens on this request
    verify_steps: np.ndarray
    per_position: np.ndarray
    drafted: np.ndarray
    accepted: np.ndarray
    ttft_ms: np.ndarray
    e2e_ms: np.ndarray
    batch_size: np.ndarray
    instance: np.ndarray
    k: np.ndarray  # num_speculative_tokens of each request
    step_ms: np.ndarray  # one plain target decode step of this request
    spec_cost: np.ndarray  # a speculative step costs step_ms x spec_cost
    # policy routes only: False where a request ran without speculation (no draft, no spec
    # block), and each request's tags; None: every request speculates, the route's tags
    speculative: np.ndarray | None = None
    tags: list[dict[str, str]] | None = None


def sample_requests(
    route: RouteProfile,
    load: np.ndarray,
    cond: Conditions,
    base_error_rate: float,
    timeout_ms: float,
    fixed: np.random.Generator,
    chain: np.random.Generator,
) -> Requests:
    """Draw n requests of ``route`` (n = len(load)) under per-request conditions ``cond``.

    Output length is lognormal; verify steps S are chosen so S + accepted lands on it, with
    per-position survivors n_i = Binomial(n_{i-1}, alpha) from n_{-1} = S. Decode time is
    S steps of t_target (1 + k c) x batch factor, so lower acceptance means more steps and
    lower throughput. ``load`` is the intensity relative to the route's mean (batch sizes).

    ``cond.rate`` is the engine rate at the route's own draft length; it sets the per-token
    chain acceptance alpha. A request drafting ``cond.k`` tokens (``draft_length``) keeps
    that alpha, so the positions both lengths share keep their acceptance while the raw
    rate moves with the length.
    """
    n = len(load)
    k_route = route.num_speculative_tokens
    k = np.asarray(cond.k, dtype=np.int64)
    k_max = int(k.max()) if n else k_route

    # --- fixed-size draws, in a fixed order ---
    prompt = np.maximum(1, np.rint(route.prompt_median * fixed.lognormal(0, route.prompt_sigma, n)))
    length = np.rint(route.output_median * fixed.lognormal(0, route.output_sigma, n))
    length = np.clip(length, 1, route.max_output)
    u_status, u_kind, u_nodraft = fixed.random(n), fixed.random(n), fixed.random(n)
    err_len = np.floor(fixed.exponential(_ERROR_OUTPUT_MEAN, n))
    step_jitter = fixed.lognormal(0, 0.08, n)
    ttft_jitter = fixed.lognormal(0, 0.3, n)
    u_timeout = fixed.random(n)
    instance = fixed.integers(0, route.replicas, n)

    failed = u_status < np.maximum(cond.error_rate, base_error_rate)
    status = np.where(failed, 1 + np.searchsorted(_ERROR_KINDS, u_kind), 0)
    length = np.where(failed, np.minimum(length, err_len), length).astype(np.int64)

    drafting = cond.spec_on & (u_nodraft >= route.no_draft) & (length > 0)

    # --- parameter-dependent draws ---
    # Per-request acceptance: Beta around the mean that makes the pooled rate hit the target.
    rates, which = np.unique(np.round(cond.rate, 6), return_inverse=True)
    means = np.array([calibrated_mean(float(r), k_route, route.concentration) for r in rates])
    mean = means[which]
    alpha = chain.beta(mean * route.concentration, (1.0 - mean) * route.concentration)
    steps, per_position, accepted, drafted, output = draft_chains(
        alpha, k, k_max, length, drafting, route.max_output, chain)

    batch = 1 + chain.poisson(route.batch_mean * load * cond.batch_mult)

    # --- latency ---
    spec_cost = 1.0 + k * route.draft_cost * cond.draft_cost_mult
    step_ms, ttft, e2e = timing(route, cond, batch, prompt, steps, output, drafting, spec_cost,
                                status, step_jitter, ttft_jitter, u_timeout, timeout_ms)

    return Requests(
        status=status,
        prompt_tokens=prompt.astype(np.int64),
        output_tokens=output.astype(np.int64),
        drafting=drafting,
        verify_steps=steps,
        per_position=per_position,
        drafted=drafted,
        accepted=accepted,
        ttft_ms=ttft,
        e2e_ms=e2e,
        batch_size=batch.astype(np.int64),
        instance=instance,
        k=k,
        step_ms=step_ms,
        spec_cost=spec_cost,
    )


def draft_chains(
    alpha: np.ndarray, k: np.ndarray, k_max: int, length: np.ndarray, drafting: np.ndarray,
    max_output: int, chain: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Verification steps, per-position survivors, accepted, drafted and output tokens of
    requests with per-token acceptance ``alpha`` at draft lengths ``k`` (``chain`` draws).

    Steps are chosen so that output = steps + accepted follows the length distribution.
    """
    n = len(alpha)
    tau = np.empty(n)
    for length_k in np.unique(k).tolist():
        at = k == length_k
        tau[at] = 1.0 + length_k * engine_rate(alpha[at], length_k)
    steps = np.where(drafting, np.maximum(1, np.rint(length / tau)), 0).astype(np.int64)
    # Draft steps accept a prefix: survivors of position i go on to position i + 1 (none
    # past a request's own draft length).
    per_position = np.empty((n, k_max), dtype=np.int64)
    alive = steps
    for i in range(k_max):
        alive = chain.binomial(np.where(k > i, alive, 0), alpha)
        per_position[:, i] = alive
    # max_tokens cuts the last step short: its tokens past the limit are dropped, deepest
    # positions first, which keeps the per-position counts a prefix.
    excess = np.maximum(0, steps + per_position.sum(axis=1) - max_output)
    for i in range(k_max - 1, -1, -1):
        cut = np.minimum(excess, per_position[:, i])
        per_position[:, i] -= cut
        excess -= cut
    accepted = per_position.sum(axis=1)
    drafted = k * steps
    output = np.where(drafting, steps + accepted, length)
    return steps, per_position, accepted, drafted, output


def timing(
    route: RouteProfile, cond: Conditions, batch: np.ndarray, prompt: np.ndarray,
    steps: np.ndarray, output: np.ndarray, drafting: np.ndarray, spec_cost: np.ndarray,
    status: np.ndarray, step_jitter: np.ndarray, ttft_jitter: np.ndarray,
    u_timeout: np.ndarray, timeout_ms: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One plain target step, TTFT and e2e of each request: a speculative step costs
    ``spec_cost`` plain steps, and without a draft every output token is one plain step;
    timed-out requests last at least the timeout."""
    step_ms = route.target_step_ms * batch_factor(batch) * cond.slowdown * step_jitter
    decode_ms = np.where(drafting, steps * step_ms * spec_cost, output * step_ms)
    ttft = (_PREFILL_BASE_MS + prompt * route.prefill_ms_per_token) * (1 + (batch - 1) / 64.0)
    ttft = np.round(ttft * ttft_jitter, 1)
    e2e = ttft + decode_ms
    timed_out = status == STATUSES.index("timeout")
    e2e = np.where(timed_out, np.maximum(e2e, timeout_ms * (1 + 0.02 * u_timeout)), e2e)
    e2e = np.maximum(np.round(e2e, 1), ttft)
    return step_ms, ttft, e2e
