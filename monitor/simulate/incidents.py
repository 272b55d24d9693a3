"""Scriptable incidents: what goes wrong on a route, from when, for how long.

Spec strings look like ``kind:route=NAME,at=OFFSET[,for=DURATION][,key=value...]``, e.g.
``"revision_change:route=creative-writing,at=2h,factor=0.85"``,
``"draft_length:route=creative-writing,at=2h,k=5"`` or
``"silence:route=chat,at=30m,for=10m"``. ``at`` is an offset from the simulation start;
without ``for`` the incident lasts until the end. ``route=*`` hits every route. Route names
cannot contain ``,`` or ``=`` in this syntax (the Python API takes any name).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from monitor.simulate.durations import format_duration, parse_duration
from monitor.simulate.exceptions import SimulationError

# kind -> (what it does, its parameters with defaults)
KINDS: dict[str, tuple[str, dict[str, Any]]] = {
    "revision_change": (
        "target revision changes, the draft does not: acceptance x factor (draft drift; "
        "1: a fine-tune that keeps acceptance)",
        {"factor": 0.85, "revision": None},
    ),
    "draft_change": (
        "draft revision changes, the target does not: acceptance x factor (above 1: better)",
        {"factor": 0.85, "revision": None},
    ),
    "draft_length": (
        "num_speculative_tokens becomes k, no drift: shared positions keep their acceptance, "
        "the raw rate moves",
        {"k": 5},
    ),
    "tokenizer_swap": (
        "draft swapped for another family (tokenizer differs): acceptance collapses",
        {"acceptance": 0.1, "slowdown": 1.3},
    ),
    "eviction": (
        "a share of requests have draft_evicted true and slower decode; acceptance unchanged",
        {"share": 0.3, "slowdown": 2.5},
    ),
    "silence": ("the route sends nothing", {}),
    "speculation_off": (
        "the route drafts nothing on every request (draft failed to load)",
        {},
    ),
    "acceptance_shift": ("acceptance x factor, no metadata change", {"factor": 0.8}),
    "error_spike": (
        "an outage: error rate jumps to `rate` and decode slows by `slowdown`",
        {"rate": 0.25, "slowdown": 2.0},
    ),
    "batch_surge": (
        "running batch size x factor: throughput down, acceptance flat",
        {"factor": 3.0},
    ),
    "lossy_verifier": (
        "the verifier keeps some draft tokens unchecked: a share of greedy speculative outputs "
        "differ from the target's (output_hash; needs v1.1 fields)",
        {"share": 0.2},
    ),
}

_FLOAT_PARAMS = {"factor", "acceptance", "slowdown", "share", "rate"}
_INT_PARAMS = {"k"}
# Kinds whose ``factor`` multiplies the acceptance rate: beyond this it is no longer a
# plausible change of one model (and the rate would leave (0, 1) on most routes).
ACCEPTANCE_FACTOR_KINDS = ("revision_change", "draft_change", "acceptance_shift")
MAX_ACCEPTANCE_FACTOR = 2.0
MAX_DRAFT_LENGTH = 32
# Kinds that act on the draft model: a draft-free route (n-gram) cannot have them.
NEEDS_DRAFT = ("tokenizer_swap", "eviction", "draft_change")
# Kinds seen only in telemetry v1.1 fields.
V11_KINDS = ("lossy_verifier",)


@dataclass(frozen=True)
class Incident:
    """One incident on one route (or ``"*"``: every route).

    Parameters not given take the kind's default (see ``KINDS``); ``revision`` (the new
    target revision of ``revision_change``, the new draft revision of ``draft_change``)
    defaults to the incident's start date. ``k`` is ``draft_length``'s new draft length.
    """

    kind: str
    route: str
    at_s: float = 0.0
    duration_s: float | None = None
    factor: float | None = None
    acceptance: float | None = None
    slowdown: float | None = None
    share: float | None = None
    rate: float | None = None
    revision: str | None = None
    k: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SimulationError(f"unknown incident kind {self.kind!r}; known: {', '.join(KINDS)}")
        if not self.route:
            raise SimulationError(f"{self.kind}: route is required")
        if self.at_s < 0 or (self.duration_s is not None and self.duration_s <= 0):
            raise SimulationError(f"{self.kind}: at must be >= 0 and for > 0")
        allowed = KINDS[self.kind][1]
        for name in ("factor", "acceptance", "slowdown", "share", "rate", "revision", "k"):
            value = getattr(self, name)
            if value is None:
                continue
            if name not in allowed:
                raise SimulationError(
                    f"{self.kind} takes no {name!r}; it takes: {', '.join(allowed) or 'nothing'}"
                )
            if name in ("acceptance", "share", "rate") and not 0.0 <= value <= 1.0:
                raise SimulationError(f"{self.kind}: {name} must be in [0, 1], got {value}")
            if name in ("factor", "slowdown") and not value > 0:
                raise SimulationError(f"{self.kind}: {name} must be > 0, got {value}")
            if (name == "factor" and self.kind in ACCEPTANCE_FACTOR_KINDS
                    and value > MAX_ACCEPTANCE_FACTOR):
                raise SimulationError(
                    f"{self.kind}: factor multiplies acceptance and must be at most "
                    f"{MAX_ACCEPTANCE_FACTOR:g}, got {value}"
                )
            if name == "k" and (isinstance(value, bool) or not isinstance(value, int)
                                or not 1 <= value <= MAX_DRAFT_LENGTH):
                raise SimulationError(
                    f"{self.kind}: k must be an integer in [1, {MAX_DRAFT_LENGTH}], got {value!r}"
                )

    def param(self, name: str) -> Any:
        """The parameter's value, or the kind's default."""
        value = getattr(self, name)
        return KINDS[self.kind][1].get(name) if value is None else value

    @property
    def end_s(self) -> float:
        """Offset where the incident ends (infinite without a duration)."""
        return float("inf") if self.duration_s is None else self.at_s + self.duration_s

    def applies_to(self, route: str) -> bool:
        return self.route in ("*", route)

    @classmethod
    def parse(cls, text: str) -> Incident:
        """Read a spec string.

        >>> Incident.parse("silence:route=chat,at=30m,for=10m")
        Incident(kind='silence', route='chat', at_s=1800.0, duration_s=600.0, ...)
        >>> str(Incident.parse("revision_change:route=creative-writing,at=2h,factor=0.85"))
        'revision_change:route=creative-writing,at=2h,factor=0.85'
        """
        kind, sep, rest = text.strip().partition(":")
        kind = kind.strip()
        if not sep and kind not in KINDS:
            raise SimulationError(f"bad incident {text!r}: expected kind:route=NAME,at=OFFSET,...")
        values: dict[str, Any] = {}
        seen: set[str] = set()
        for item in filter(None, (p.strip() for p in rest.split(","))):
            key, eq, value = item.partition("=")
            key, value = key.strip(), value.strip()
            if not eq or not value:
                raise SimulationError(f"bad incident {text!r}: {item!r} is not key=value")
            canonical = "for" if key == "duration" else key
            if canonical in seen:
                raise SimulationError(f"bad incident {text!r}: {key} given twice")
            seen.add(canonical)
            if key == "route":
                values["route"] = value
            elif key == "at":
                values["at_s"] = parse_duration(value)
            elif key in ("for", "duration"):
                values["duration_s"] = parse_duration(value)
            elif key in _FLOAT_PARAMS:
                try:
                    values[key] = float(value)
                except ValueError:
                    raise SimulationError(f"bad incident {text!r}: {key}={value!r}") from None
            elif key in _INT_PARAMS:
                try:
                    values[key] = int(value)
                except ValueError:
                    raise SimulationError(f"bad incident {text!r}: {key}={value!r}") from None
            elif key == "revision":
                values[key] = value
            else:
                known = ["route", "at", "for", *KINDS.get(kind, ("", {}))[1]]
                raise SimulationError(
                    f"bad incident {text!r}: unknown key {key!r}; known: {', '.join(known)}"
                )
        if "route" not in values:
            raise SimulationError(f"bad incident {text!r}: route=NAME is required")
        return cls(kind=kind, **values)

    def __str__(self) -> str:
        parts = [f"route={self.route}", f"at={format_duration(self.at_s)}"]
        if self.duration_s is not None:
            parts.append(f"for={format_duration(self.duration_s)}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("kind", "route", "at_s", "duration_s") or value is None:
                continue
            parts.append(f"{f.name}={value:g}" if isinstance(value, float) else f"{f.name}={value}")
        return f"{self.kind}:{','.join(parts)}"
