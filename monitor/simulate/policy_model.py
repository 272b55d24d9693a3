"""Per-request numbers of a ``policy`` scenario route (see :mod:`.policy_traits`).

Like :func:`monitor.simulate.model.sample_requests`, everything is drawn for a chunk at once,
with the fixed-size draws (lengths, tag, with or without speculation, batch size) on
``fixed`` and the parameter-dependent ones (Beta acceptance, binomial chains) on ``chain``.
What differs:

- a request's mean chain alpha is its tag value's (times the incident factor on the route's
  rate), not calibrated from an engine rate;
- a speculative step with ``k`` drafts costs ``step_ms (1 + k (c + v(batch)))``;
- ``plain_share`` of the requests run without speculation: ``output`` plain target steps,
  and no ``spec`` block (``Requests.speculative`` False);
- batch sizes are log-uniform (:meth:`PolicyTraits.batch_sizes`), not Poisson around a mean.
"""

from __future__ import annotations

import numpy as np

from monitor.simulate.effects import Conditions
from monitor.simulate.model import (
    _ERROR_KINDS,
    _ERROR_OUTPUT_MEAN,
    Requests,
    draft_chains,
    timing,
)
from monitor.simulate.profiles import RouteProfile

_ALPHA_MAX = 0.995  # an incident factor must not push a Beta mean to 1


def sample_policy_requests(
    route: RouteProfile,
    load: np.ndarray,
    cond: Conditions,
    base_error_rate: float,
    timeout_ms: float,
    fixed: np.random.Generator,
    chain: np.random.Generator,
) -> Requests:
    """Draw n requests of the policy route ``route`` (n = len(load)); see the module doc.

    Each request's tags (the route's, plus its own tag value) are in ``Requests.tags``.
    """
    traits = route.policy
    if traits is None:
        raise ValueError(f"{route.name} is not a policy route")
    n = len(load)
    k = np.asarray(cond.k, dtype=np.int64)
    k_max = int(k.max()) if n else route.num_speculative_tokens

    # --- fixed-size draws, in a fixed order ---
    prompt = np.maximum(1, np.rint(route.prompt_median * fixed.lognormal(0, route.prompt_sigma, n)))
    length = np.rint(route.output_median * fixed.lognormal(0, route.output_sigma, n))
    length = np.clip(length, 1, route.max_output)
    u_status, u_kind, u_tag, u_plain, u_batch = fixed.random((5, n))
    err_len = np.floor(fixed.exponential(_ERROR_OUTPUT_MEAN, n))
    step_jitter = fixed.lognormal(0, 0.08, n)
    ttft_jitter = fixed.lognormal(0, 0.3, n)
    u_timeout = fixed.random(n)
    instance = fixed.integers(0, route.replicas, n)

    failed = u_status < np.maximum(cond.error_rate, base_error_rate)
    status = np.where(failed, 1 + np.searchsorted(_ERROR_KINDS, u_kind), 0)
    length = np.where(failed, np.minimum(length, err_len), length).astype(np.int64)

    which = traits.value_index(u_tag) if traits.values else np.zeros(n, dtype=np.int64)
    speculative = u_plain >= traits.plain_share
    drafting = cond.spec_on & speculative & (length > 0)
    batch = traits.batch_sizes(u_batch, load * cond.batch_mult)

    # --- parameter-dependent draws ---
    # Incidents move the route's rate by a factor; the tag values keep their ratios.
    mean = np.minimum(traits.alphas()[which] * cond.rate / route.acceptance, _ALPHA_MAX)
    conc = route.concentration
    alpha = chain.beta(mean * conc, (1.0 - mean) * conc)
    steps, per_position, accepted, drafted, output = draft_chains(
        alpha, k, k_max, length, drafting, route.max_output, chain)

    # --- latency ---
    marginal = route.draft_cost * cond.draft_cost_mult + traits.verify.at(batch)
    spec_cost = np.where(drafting, 1.0 + k * marginal, 1.0)
    step_ms, ttft, e2e = timing(route, cond, batch, prompt, steps, output, drafting, spec_cost,
                                status, step_jitter, ttft_jitter, u_timeout, timeout_ms)

    base = dict(route.tags)
    if traits.tag_key is None:
        tags = [base] * n  # shared: the simulator copies tags into each event
    else:
        per_value = [{**base, traits.tag_key: v.value} for v in traits.values]
        tags = [per_value[i] for i in which.tolist()]

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
        batch_size=batch,
        instance=instance,
        k=k,
        step_ms=step_ms,
        spec_cost=spec_cost,
        speculative=speculative,
        tags=tags,
    )
