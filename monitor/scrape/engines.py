"""Where each engine keeps its speculative-decoding numbers on ``/metrics``, and reading them.

Names follow ``shared/reference/engine-telemetry.md`` (vLLM V1 1.1/1.4, SGLang 2.2,
TensorRT-LLM 3.3) and, for llama.cpp, ``llama-server --metrics`` as written by
``server_task_result_metrics::to_metrics`` (``tools/server/server-task.cpp``; reference
``real-engines-on-cpu.md``). Everything is matched on *sample* names with a trailing ``_total``
removed, and ``:`` read as ``_`` (OpenMetrics exporters may escape it). prometheus_client's
text parser strips ``_total`` from a counter's family name but not from its samples, an
exporter without ``# TYPE`` lines leaves the family "unknown" with the suffix on, and an
engine may expose a counter without the suffix at all: reading samples and dropping the
suffix treats all three alike.

What each engine offers (per interval, from counter increases; names without ``_total``):

- verify steps: vLLM ``vllm:spec_decode_num_drafts``; SGLang ``sglang:spec_verify_calls``;
  llama.cpp ``llamacpp:spec_decode_num_drafts``; TRT-LLM has none, so the drafted tokens at
  position 0 stand in (*).
- drafted / accepted tokens: vLLM ``vllm:spec_decode_num_draft_tokens`` /
  ``vllm:spec_decode_num_accepted_tokens``; TRT-LLM ``trtllm_spec_decode_num_draft_tokens`` /
  ``trtllm_spec_decode_num_accepted_tokens``; llama.cpp
  ``llamacpp:spec_decode_num_draft_tokens`` / ``llamacpp:spec_decode_num_accepted_tokens``;
  SGLang none (derived, ``event.py``).
- accepted per position: vLLM ``vllm:spec_decode_num_accepted_tokens_per_pos{position}``;
  TRT-LLM ``trtllm_spec_decode_accepted_tokens{token_position}``; llama.cpp
  ``llamacpp:spec_decode_num_accepted_tokens_per_pos{position}``.
- finished requests: vLLM ``vllm:request_success`` (all finish reasons; abort and error
  are the failures); SGLang ``sglang:num_requests`` (``num_aborted_requests`` failed);
  TRT-LLM ``trtllm_request_success`` + ``trtllm_request_error``; llama.cpp none.
- tokens and latency: ``*generation_tokens``, ``*prompt_tokens``, the
  ``*time_to_first_token_seconds`` and ``*e2e_request_latency_seconds`` histograms;
  llama.cpp ``llamacpp:tokens_predicted`` and ``llamacpp:prompt_tokens`` (processed) plus
  ``llamacpp:prompt_tokens_cached`` (reused), and no latency histogram.

(*) each verification step with a draft drafts position 0 exactly once.

llama.cpp differs from the prometheus_client engines in ways that matter here:

- its spec-decode counters are always exposed, 0 while nothing was drafted. A target is
  configured with a draft length, i.e. as speculating, so an active interval in which nothing
  was drafted is an event with ``drafted_tokens`` 0: the silent disablement of an incompatible
  draft model (llama-server logs an error and serves on without speculation) shows up as
  ``speculation_inactive`` instead of as no data;
- no ``process_start_time_seconds`` and no ``_created``: a restart is seen as counters going
  down (``counters.py``), so a restart that overtakes the old values within one
  interval under-counts that interval;
- values are printed with C++'s default stream precision, 6 significant digits
  (``1.23457e+06``): once a counter passes 10^6 its increases are exact only to that
  precision (a rounded counter still never goes down, so no false reset);
- no finished-request counter and no latency histogram: ``scrape.requests`` is null and
  ``e2e_ms`` is 0 in its events.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as _openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families as _text_families

from monitor.scrape.exceptions import ScrapeError

__all__ = [
    "PROFILES",
    "EngineProfile",
    "Quantity",
    "Reading",
    "ScrapeError",
    "SeriesKey",
    "read_exposition",
    "totals",
]

# (sample name without "_total", sorted label pairs)
SeriesKey = tuple[str, tuple[tuple[str, str], ...]]

START_TIME = "process_start_time_seconds"


@dataclass(frozen=True, slots=True)
class Quantity:
    """Counter series summed into one number of the interval.

    ``by`` splits the sum by a label (per-position counts); ``only`` keeps the samples whose
    label has one of the given values (vLLM's failed requests: ``finished_reason`` abort or
    error).
    """

    names: tuple[str, ...]
    by: str | None = None
    only: tuple[str, frozenset[str]] | None = None

    def admits(self, labels: Mapping[str, str]) -> bool:
        if self.only is not None and labels.get(self.only[0]) not in self.only[1]:
            return False
        return self.by is None or self.by in labels


def _q(*names: str, by: str | None = None, only: tuple[str, Iterable[str]] | None = None
       ) -> Quantity:
    return Quantity(names, by, None if only is None else (only[0], frozenset(only[1])))


@dataclass(frozen=True)
class EngineProfile:
    """One engine's quantities. ``spec_quantity`` is present in the exposition exactly when
    speculative decoding is configured on the engine."""

    engine: str
    quantities: Mapping[str, Quantity]
    spec_quantity: str
    # Sample names as matched (see _match_name) -> the names above.
    series_names: dict[str, str] = field(init=False)
    created_bases: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        names = {n for q in self.quantities.values() for n in q.names}
        object.__setattr__(self, "series_names", {_match_name(n): n for n in names})
        # A histogram's `_created` sample is named after the histogram, not its _sum/_count.
        object.__setattr__(self, "created_bases",
                           {_match_name(_base(n)): _base(n) for n in names})


def _match_name(name: str) -> str:
    # OpenMetrics exporters may escape the ':' of recording-rule-style names ("vllm:...")
    # to '_' (prometheus_client's default escaping); match either spelling.
    return name.replace(":", "_")


def _base(name: str) -> str:
    for suffix in ("_sum", "_count"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _latency(prefix: str, ttft: str, e2e: str) -> dict[str, Quantity]:
    return {
        "ttft_sum": _q(f"{prefix}{ttft}_sum"), "ttft_count": _q(f"{prefix}{ttft}_count"),
        "e2e_sum": _q(f"{prefix}{e2e}_sum"), "e2e_count": _q(f"{prefix}{e2e}_count"),
    }


VLLM = EngineProfile("vllm", {
    "drafts": _q("vllm:spec_decode_num_drafts"),
    "draft_tokens": _q("vllm:spec_decode_num_draft_tokens"),
    "accepted_tokens": _q("vllm:spec_decode_num_accepted_tokens"),
    "accepted_pos": _q("vllm:spec_decode_num_accepted_tokens_per_pos", by="position"),
    # Counts every finished request, by reason: not only successes (reference 1.4).
    "requests": _q("vllm:request_success"),
    "errors": _q("vllm:request_success", only=("finished_reason", ("abort", "error"))),
    "generation_tokens": _q("vllm:generation_tokens"),
    "prompt_tokens": _q("vllm:prompt_tokens"),
    **_latency("vllm:", "time_to_first_token_seconds", "e2e_request_latency_seconds"),
}, spec_quantity="draft_tokens")

SGLANG = EngineProfile("sglang", {
    "drafts": _q("sglang:spec_verify_calls"),
    # Both are observed once per finished request, with the per-request custom labels.
    "requests": _q("sglang:num_requests"),
    "errors": _q("sglang:num_aborted_requests"),
    "generation_tokens": _q("sglang:generation_tokens"),
    "prompt_tokens": _q("sglang:prompt_tokens"),
    **_latency("sglang:", "time_to_first_token_seconds", "e2e_request_latency_seconds"),
}, spec_quantity="drafts")

TRTLLM = EngineProfile("trtllm", {
    "draft_tokens": _q("trtllm_spec_decode_num_draft_tokens"),
    "accepted_tokens": _q("trtllm_spec_decode_num_accepted_tokens"),
    "accepted_pos": _q("trtllm_spec_decode_accepted_tokens", by="token_position"),
    "drafted_pos": _q("trtllm_spec_decode_drafted_tokens", by="token_position"),
    "requests": _q("trtllm_request_success", "trtllm_request_error"),
    "errors": _q("trtllm_request_error"),
    "generation_tokens": _q("trtllm_generation_tokens"),
    "prompt_tokens": _q("trtllm_prompt_tokens"),
    **_latency("trtllm_", "time_to_first_token_seconds", "e2e_request_latency_seconds"),
}, spec_quantity="draft_tokens")

LLAMACPP = EngineProfile("llamacpp", {
    # "Speculative: Total speculative decoding verification steps"
    "drafts": _q("llamacpp:spec_decode_num_drafts"),
    "draft_tokens": _q("llamacpp:spec_decode_num_draft_tokens"),
    "accepted_tokens": _q("llamacpp:spec_decode_num_accepted_tokens"),
    "accepted_pos": _q("llamacpp:spec_decode_num_accepted_tokens_per_pos", by="position"),
    "generation_tokens": _q("llamacpp:tokens_predicted"),
    # prompt_tokens_total excludes the tokens reused from the cache, which count apart
    "prompt_tokens": _q("llamacpp:prompt_tokens", "llamacpp:prompt_tokens_cached"),
}, spec_quantity="draft_tokens")

PROFILES: dict[str, EngineProfile] = {p.engine: p for p in (VLLM, SGLANG, TRTLLM, LLAMACPP)}


@dataclass(slots=True)
class Reading:
    """The counters of one target in one exposition.

    ``values`` holds finite values only; a series exposed as NaN or ±Inf is in
    ``nonfinite`` instead (its last good value stays the baseline). ``created`` is the
    ``_created`` time of a value series, when the exporter shows one; ``start_time`` is
    ``process_start_time_seconds`` (absent in prometheus multiprocess mode).
    """

    values: dict[SeriesKey, float] = field(default_factory=dict)
    created: dict[SeriesKey, float] = field(default_factory=dict)
    start_time: float | None = None
    nonfinite: set[SeriesKey] = field(default_factory=set)


def read_exposition(
    text: str, profile: EngineProfile, selector: Mapping[str, str], *, openmetrics: bool = False
) -> Reading:
    """The target's counter series in a Prometheus text (or OpenMetrics) exposition.

    >>> text = '''# TYPE vllm:spec_decode_num_drafts_total counter
    ... vllm:spec_decode_num_drafts_total{engine="0",model_name="a"} 7.0
    ... vllm:spec_decode_num_drafts_total{engine="0",model_name="b"} 9.0
    ... vllm:spec_decode_num_drafts_created{engine="0",model_name="a"} 1.7e9
    ... vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="a"} NaN
    ... process_start_time_seconds 1.6e9
    ... '''
    >>> r = read_exposition(text, VLLM, {"model_name": "a"})
    >>> r.values, r.start_time
    ({('vllm:spec_decode_num_drafts', (('engine', '0'), ('model_name', 'a'))): 7.0}, 1600000000.0)
    >>> list(r.created.values()), len(r.nonfinite)
    ([1700000000.0], 1)
    """
    parse = _openmetrics_families if openmetrics else _text_families
    names, bases = profile.series_names, profile.created_bases
    reading = Reading()
    created: dict[SeriesKey, float] = {}
    try:
        for family in parse(text):
            for sample in family.samples:
                name, labels, value = sample.name, sample.labels, sample.value
                if name == START_TIME:
                    if math.isfinite(value):
                        reading.start_time = float(value)
                    continue
                if name.endswith("_created"):
                    base = bases.get(_match_name(name[: -len("_created")]))
                    if base and _selected(labels, selector) and math.isfinite(value):
                        created[(base, _label_key(labels))] = float(value)
                    continue
                name = names.get(_match_name(name.removesuffix("_total")), "")
                if not name or not _selected(labels, selector):
                    continue
                key = (name, _label_key(labels))
                if math.isfinite(value):
                    reading.values[key] = float(value)
                    reading.nonfinite.discard(key)
                else:
                    reading.nonfinite.add(key)
                    reading.values.pop(key, None)
    except Exception as exc:  # the parser raises ValueError, but also others on odd input
        raise ScrapeError(f"cannot parse the exposition: {type(exc).__name__}: {exc}") from None
    for key in reading.values:
        stamp = created.get((_base(key[0]), key[1]))
        if stamp is not None:
            reading.created[key] = stamp
    return reading


def _selected(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _label_key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def totals(increases: Mapping[SeriesKey, float], profile: EngineProfile) -> dict[str, float]:
    """Increases summed per quantity; a quantity split ``by`` a label gets one entry per
    label value (``accepted_pos:0``, ...). A quantity whose series are exposed is present
    even when it did not move, so "nothing drafted" and "not exposed" stay apart.

    >>> pos = "vllm:spec_decode_num_accepted_tokens_per_pos"
    >>> inc = {(pos, (("engine", "0"), ("position", "1"))): 2.0,
    ...        (pos, (("engine", "1"), ("position", "1"))): 3.0,
    ...        ("vllm:request_success", (("finished_reason", "stop"),)): 4.0,
    ...        ("vllm:request_success", (("finished_reason", "abort"),)): 1.0}
    >>> totals(inc, VLLM)
    {'accepted_pos:1': 5.0, 'requests': 5.0, 'errors': 1.0}
    """
    out: dict[str, float] = {}
    for quantity_name, quantity in profile.quantities.items():
        for (name, label_pairs), increase in increases.items():
            if name not in quantity.names:
                continue
            labels = dict(label_pairs)
            if not quantity.admits(labels):
                continue
            key = quantity_name if quantity.by is None else f"{quantity_name}:{labels[quantity.by]}"
            out[key] = out.get(key, 0.0) + increase
    return out
