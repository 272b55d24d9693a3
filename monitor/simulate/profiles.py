"""Route profiles: what a route serves, how it drafts, and how its traffic is shaped.

The default routes are calibrated on the numbers in ``shared/reference``: engine acceptance
rates (accepted / drafted) of 0.81 on code and 0.44 on creative text with a real draft model,
per-request spreads of about 0.70-1.00 (code) and 0.23-0.78 (creative), and n-gram drafting
that proposes nothing on a large share of requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from monitor.simulate.exceptions import SimulationError
from monitor.simulate.policy_traits import PolicyTraits, TagValue, VerifyCost


@dataclass(frozen=True)
class TargetModel:
    """The model that verifies (telemetry ``target``)."""

    model: str
    revision: str
    tokenizer: str

    def as_dict(self) -> dict[str, str]:
        return {"model": self.model, "revision": self.revision, "tokenizer": self.tokenizer}


@dataclass(frozen=True)
class DraftModel:
    """The model that proposes (telemetry ``draft``); ``pinned_target_revision`` may be None."""

    model: str
    revision: str
    tokenizer: str
    pinned_target_revision: str | None = None

    def as_dict(self) -> dict[str, str]:
        d = {"model": self.model, "revision": self.revision, "tokenizer": self.tokenizer}
        if self.pinned_target_revision is not None:
            d["pinned_target_revision"] = self.pinned_target_revision
        return d


@dataclass(frozen=True)
class RouteProfile:
    """One serving route.

    ``acceptance`` is the route's engine acceptance rate, sum(accepted) / sum(drafted) over
    many requests: the number the daemon measures. The simulator turns it into the per-token
    (chain) acceptance probability that gives this rate at ``num_speculative_tokens``.
    ``concentration`` is the Beta concentration of per-request acceptance: lower means more
    spread between requests (prompt heterogeneity). ``draft_cost`` is the draft/target cost
    ratio c of one step; ``no_draft`` the share of requests that propose nothing (n-gram
    lookups that find no match). ``draft`` is None for draft-free methods (``ngram``).
    """

    name: str
    target: TargetModel
    draft: DraftModel | None
    method: str = "draft_model"
    num_speculative_tokens: int = 4
    acceptance: float = 0.6
    concentration: float = 30.0
    no_draft: float = 0.0
    share: float = 1.0
    draft_cost: float = 0.1
    target_step_ms: float = 25.0
    prefill_ms_per_token: float = 0.12
    output_median: float = 200.0
    output_sigma: float = 0.7
    max_output: int = 2048
    prompt_median: float = 500.0
    prompt_sigma: float = 0.8
    temperature: float = 0.0
    batch_mean: float = 12.0
    replicas: int = 4
    spec_params: Mapping[str, Any] = field(default_factory=dict, compare=False)
    # Telemetry v1.1 (emitted only when the simulation asks for v1.1 fields):
    gpus: float = 1.0
    reports_gpu_seconds: bool = True
    outcomes: Mapping[str, float] = field(default_factory=dict, compare=False)
    tags: Mapping[str, str] = field(default_factory=dict, compare=False)
    # Routes of the ``policy`` scenario: tagged acceptance, batch-dependent verification
    # cost and requests without speculation (see ``policy_traits``); None for the others.
    policy: PolicyTraits | None = None

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > 128:
            raise SimulationError(f"route name must have 1..128 characters: {self.name!r}")
        if self.num_speculative_tokens < 1:
            raise SimulationError(f"{self.name}: num_speculative_tokens must be >= 1")
        if not 0.0 < self.acceptance < 1.0:
            raise SimulationError(f"{self.name}: acceptance must be in (0, 1)")
        if self.concentration <= 0 or self.share < 0 or not 0.0 <= self.no_draft <= 1.0:
            raise SimulationError(
                f"{self.name}: concentration > 0, share >= 0, no_draft in [0, 1] required"
            )
        if self.replicas < 1 or self.max_output < 1 or self.batch_mean < 0:
            raise SimulationError(f"{self.name}: replicas, max_output >= 1, batch_mean >= 0")
        if not self.gpus > 0:
            raise SimulationError(f"{self.name}: gpus must be > 0")
        check_outcomes(self.name, self.outcomes)
        # 16 labels at most per event, and shadow requests add one
        if len(self.tags) > 15 or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.tags.items()
        ):
            raise SimulationError(f"{self.name}: tags are at most 15 string -> string labels")
        # Read-only copies, so a caller's dict can't change a frozen profile afterwards.
        for name in ("spec_params", "outcomes", "tags"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    def outcome_probability(self, name: str, outcomes: Mapping[str, float] | None = None) -> float:
        """How often a request with status ``ok`` reports ``outcome.<name>`` true.

        ``outcomes`` (default: the profile's) state ``schema_valid`` and ``tool_calls_valid``
        as plain probabilities, tool calls valid only where the JSON is; ``ok`` is conditional
        on the other reported outcomes being true (a task with a broken tool call failed).

        >>> JSON_TOOLS.outcome_probability("tool_calls_valid")
        0.97
        >>> round(JSON_TOOLS.outcome_probability("ok"), 4)
        0.9603
        """
        p = dict(self.outcomes if outcomes is None else outcomes)
        if name != "ok":
            return p[name]
        valid = min((p[k] for k in ("schema_valid", "tool_calls_valid") if k in p), default=1.0)
        return p["ok"] * valid

    def with_(self, **changes: Any) -> RouteProfile:
        """A copy with some fields changed."""
        return replace(self, **changes)

    def expected_speedup(self, acceptance: float | None = None) -> float:
        """Decode speed-up over no speculation at batch size 1: (1 + k·r) / (1 + k·c).

        Below 1.0 speculation costs more than it saves; the default creative route sits
        near that line on purpose, so a 15 % acceptance drop makes it a net loss.

        >>> round(DEFAULT_ROUTES[3].expected_speedup(), 2)
        1.1
        """
        r = self.acceptance if acceptance is None else acceptance
        k = self.num_speculative_tokens
        return (1.0 + k * r) / (1.0 + k * self.draft_cost)


OUTCOMES = ("ok", "schema_valid", "tool_calls_valid")


def check_outcomes(where: str, outcomes: Mapping[str, float]) -> None:
    """Outcome probabilities: known names, each in [0, 1], tool calls valid only on valid JSON."""
    unknown = set(outcomes) - set(OUTCOMES)
    if unknown:
        raise SimulationError(f"{where}: unknown outcome(s) {sorted(unknown)}; known: {OUTCOMES}")
    if not all(0.0 <= float(p) <= 1.0 for p in outcomes.values()):
        raise SimulationError(f"{where}: outcome probabilities must be in [0, 1]")
    if outcomes.get("tool_calls_valid", 0.0) > outcomes.get("schema_valid", 1.0):
        raise SimulationError(f"{where}: tool_calls_valid cannot exceed schema_valid")


_LLAMA70 = TargetModel("llama-3.1-70b-instruct", "2026-10-28", "llama3")

DEFAULT_ROUTES: tuple[RouteProfile, ...] = (
    RouteProfile(
        name="code-assistant",
        target=TargetModel("qwen2.5-coder-32b-instruct", "2026-10-14", "qwen2"),
        draft=DraftModel("qwen2.5-coder-0.5b-instruct", "2026-09-30", "qwen2", "2026-10-14"),
        method="draft_model", num_speculative_tokens=5, acceptance=0.80, concentration=40.0,
        share=0.30, draft_cost=0.08, target_step_ms=18.0, prefill_ms_per_token=0.08,
        output_median=220.0, output_sigma=0.8, prompt_median=900.0, prompt_sigma=0.9,
        temperature=0.0, batch_mean=12.0, replicas=4,
    ),
    RouteProfile(
        name="chat",
        target=_LLAMA70,
        draft=DraftModel("llama-3.1-70b-instruct-eagle3", "2026-10-30", "llama3", "2026-10-28"),
        method="eagle", num_speculative_tokens=4, acceptance=0.65, concentration=30.0,
        share=0.30, draft_cost=0.05, target_step_ms=30.0, prefill_ms_per_token=0.15,
        output_median=280.0, output_sigma=0.7, prompt_median=600.0, prompt_sigma=1.0,
        temperature=0.7, batch_mean=16.0, replicas=6,
    ),
    RouteProfile(
        name="summarize",
        target=_LLAMA70,
        draft=None,
        method="ngram", num_speculative_tokens=4, acceptance=0.60, concentration=25.0,
        no_draft=0.35, share=0.15, draft_cost=0.01, target_step_ms=30.0,
        prefill_ms_per_token=0.15, output_median=180.0, output_sigma=0.5, max_output=1024,
        prompt_median=3000.0, prompt_sigma=0.6, temperature=0.0, batch_mean=8.0, replicas=3,
        spec_params={"prompt_lookup_min": 2, "prompt_lookup_max": 4},
    ),
    RouteProfile(
        # Sampling at 0.7 with a small draft: acceptance 0.42 at c = 0.35 puts this route just
        # above break-even, which is where a drift hurts first.
        name="creative-writing",
        target=_LLAMA70,
        draft=DraftModel("llama-3.2-1b-instruct", "2026-09-30", "llama3", "2026-10-28"),
        method="draft_model", num_speculative_tokens=3, acceptance=0.42, concentration=20.0,
        share=0.15, draft_cost=0.35, target_step_ms=30.0, prefill_ms_per_token=0.15,
        output_median=450.0, output_sigma=0.6, prompt_median=250.0, prompt_sigma=0.8,
        temperature=0.7, batch_mean=10.0, replicas=3,
    ),
    RouteProfile(
        name="translation",
        target=TargetModel("gemma-3-27b-it", "2026-08-20", "gemma3"),
        draft=DraftModel("gemma-3-1b-it", "2026-08-20", "gemma3", "2026-08-20"),
        method="draft_model", num_speculative_tokens=3, acceptance=0.35, concentration=25.0,
        share=0.10, draft_cost=0.2, target_step_ms=16.0, prefill_ms_per_token=0.07,
        output_median=160.0, output_sigma=0.6, max_output=1024, prompt_median=180.0,
        prompt_sigma=0.6, temperature=0.0, batch_mean=10.0, replicas=2,
    ),
)

# Drafts of other model families, for tokenizer_swap: someone points the route at a draft whose
# vocabulary does not match the target's.
FOREIGN_DRAFTS: tuple[DraftModel, ...] = (
    DraftModel("qwen2.5-0.5b-instruct", "2026-09-19", "qwen2"),
    DraftModel("llama-3.2-1b-instruct", "2026-09-30", "llama3"),
    DraftModel("smollm2-135m-instruct", "2026-07-01", "smollm2"),
)


def foreign_draft(route: RouteProfile) -> DraftModel:
    """A draft whose tokenizer differs from the route's target tokenizer."""
    for draft in FOREIGN_DRAFTS:
        if draft.tokenizer != route.target.tokenizer:
            pinned = route.draft.pinned_target_revision if route.draft else None
            return replace(draft, pinned_target_revision=pinned)
    raise AssertionError("FOREIGN_DRAFTS covers every tokenizer")  # pragma: no cover


# A tool-calling route that must answer in JSON: the application checks the JSON against its
# schema and the tool calls against the tool signatures. Structured output is predictable, so
# a small draft of the same family accepts well.
JSON_TOOLS = RouteProfile(
    name="json-tools",
    target=TargetModel("qwen2.5-72b-instruct", "2026-10-02", "qwen2"),
    draft=DraftModel("qwen2.5-0.5b-instruct", "2026-09-19", "qwen2", "2026-10-02"),
    method="draft_model", num_speculative_tokens=4, acceptance=0.72, concentration=35.0,
    share=0.08, draft_cost=0.06, target_step_ms=32.0, prefill_ms_per_token=0.16,
    output_median=120.0, output_sigma=0.6, max_output=1024, prompt_median=1800.0,
    prompt_sigma=0.5, temperature=0.0, batch_mean=10.0, replicas=2, gpus=4.0,
    outcomes={"schema_valid": 0.98, "tool_calls_valid": 0.97, "ok": 0.99},
    tags={"task": "tools", "format": "json"},
)

# v1.1 settings of the default routes: GPUs per replica (tensor parallel), outcome
# probabilities and tags. Code tasks pass their tests about 3 times in 4; creative writing has
# no automatic verdict (no ``outcome``: status decides); translation does not report GPU
# time, so the daemon's estimate is exercised there.
_V11: dict[str, dict[str, Any]] = {
    "code-assistant": {"gpus": 2.0, "outcomes": {"ok": 0.74}, "tags": {"task": "code"}},
    "chat": {"gpus": 4.0, "outcomes": {"ok": 0.96}, "tags": {"task": "chat"}},
    "summarize": {"gpus": 4.0, "outcomes": {"ok": 0.97}, "tags": {"task": "summarize"}},
    "creative-writing": {"gpus": 4.0, "tags": {"task": "creative"}},
    "translation": {
        "gpus": 1.0, "reports_gpu_seconds": False, "outcomes": {"ok": 0.95},
        "tags": {"task": "translate"},
    },
}

EXPERIMENT_ROUTES: tuple[RouteProfile, ...] = (
    *(r.with_(**_V11[r.name]) for r in DEFAULT_ROUTES),
    JSON_TOOLS,
)


# The ``policy`` scenario: structure a speculation policy must find from signals known before a
# request runs. One verification cost curve for every model pair: free up to batch 16, then
# rising so that rust code stops gaining near batch 64 and python near 160.
POLICY_VERIFY_COST = VerifyCost(((16, 0.0), (32, 0.15), (64, 0.40), (128, 0.55), (256, 0.75)))

POLICY_ROUTES: tuple[RouteProfile, ...] = (
    RouteProfile(
        # The draft was distilled on python: it guesses python well, rust less, and haskell so
        # rarely that speculating costs more than it saves at any batch size.
        name="code-assistant",
        target=TargetModel("qwen2.5-coder-32b-instruct", "2026-10-14", "qwen2"),
        draft=DraftModel("qwen2.5-coder-0.5b-instruct", "2026-09-30", "qwen2", "2026-10-14"),
        method="draft_model", num_speculative_tokens=4, acceptance=0.55, concentration=40.0,
        share=0.50, draft_cost=0.20, target_step_ms=18.0, prefill_ms_per_token=0.08,
        output_median=220.0, output_sigma=0.8, prompt_median=900.0, prompt_sigma=0.9,
        temperature=0.0, replicas=4, gpus=2.0, outcomes={"ok": 0.74},
        policy=PolicyTraits(
            verify=POLICY_VERIFY_COST, tag_key="lang",
            values=(TagValue("python", 0.55, 0.82), TagValue("rust", 0.30, 0.60),
                    TagValue("haskell", 0.15, 0.15)),
        ),
    ),
    RouteProfile(
        name="chat",
        target=_LLAMA70,
        draft=DraftModel("llama-3.1-70b-instruct-eagle3", "2026-10-30", "llama3", "2026-10-28"),
        method="eagle", num_speculative_tokens=3, acceptance=0.55, concentration=30.0,
        share=0.30, draft_cost=0.08, target_step_ms=30.0, prefill_ms_per_token=0.15,
        output_median=280.0, output_sigma=0.7, prompt_median=600.0, prompt_sigma=1.0,
        temperature=0.7, replicas=6, gpus=4.0, outcomes={"ok": 0.96},
        policy=PolicyTraits(verify=POLICY_VERIFY_COST, alpha=0.68),
    ),
    RouteProfile(
        # Long documents in, a short summary out: prefill dominates the latency, so even a
        # good n-gram speed-up of the decode barely moves end-to-end time.
        name="summarize",
        target=_LLAMA70,
        draft=None,
        method="ngram", num_speculative_tokens=3, acceptance=0.6, concentration=25.0,
        share=0.20, draft_cost=0.02, target_step_ms=30.0, prefill_ms_per_token=0.30,
        output_median=40.0, output_sigma=0.4, max_output=300, prompt_median=16000.0,
        prompt_sigma=0.3, temperature=0.0, replicas=3, gpus=4.0, outcomes={"ok": 0.97},
        spec_params={"prompt_lookup_min": 2, "prompt_lookup_max": 4},
        policy=PolicyTraits(verify=POLICY_VERIFY_COST, alpha=0.70),
    ),
)
