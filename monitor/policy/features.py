"""What a policy may slice traffic by: signals known before a request runs, and nothing else.

A policy that decides whether to speculate from the finished request (its acceptance, its
output length, its latency, whether it succeeded) is hindsight: it would pick "the requests
that would have benefited", which no router can know at admission. Only these may be used:
route and model pair (always), ``tags.<key>`` (labels the caller set before the request ran),
the prompt length, the sampling temperature and the running batch size, each in buckets.

>>> parse_features("tags.lang,batch_size")
('tags.lang', 'batch_size')
>>> try:
...     parse_features("output_tokens")
... except HindsightFeatureError as e:
...     print(str(e)[:72])
--features output_tokens: output_tokens is known only after the request
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence

from monitor.policy.exceptions import HindsightFeatureError, PolicyUsageError

__all__ = [
    "ALLOWED",
    "BUCKETED",
    "HINDSIGHT",
    "Buckets",
    "parse_features",
]

BUCKETED = ("prompt_tokens", "temperature", "batch_size")
ALLOWED = ("tags", *BUCKETED)
"""Selectable features besides route and model pair (``tags`` is every recorded tag key,
``tags.<key>`` one of them)."""

# Field -> why it is hindsight. Prefix entries (ending in ".") match every sub-field.
HINDSIGHT: dict[str, str] = {
    "spec.": "the drafting counters of the request (drafted, accepted, per position) are "
             "what speculation produced on it",
    "spec": "the drafting counters of the request are what speculation produced on it",
    "output_tokens": "it is an outcome of the request, not a signal available at admission",
    "ttft_ms": "it is a latency measured while the request ran",
    "e2e_ms": "it is a latency measured while the request ran",
    "latency": "latencies are measured while the request runs",
    "decode_tps": "it is a throughput measured while the request ran",
    "itl_ms": "inter-token gaps are measured while the request streams",
    "itl_ms.": "inter-token gaps are measured while the request streams",
    "status": "it is how the request ended",
    "outcome": "it is the application's verdict on the finished task",
    "outcome.": "it is the application's verdict on the finished task",
    "output_hash": "it is a hash of the output text",
    "gpu_seconds": "it is the GPU time the request used",
    "draft_evicted": "it is something that happened while the request ran",
    "accepted_tokens": "it is what speculation produced on the request",
    "drafted_tokens": "it is what speculation produced on the request",
    "acceptance": "it is what speculation produced on the request",
}


def _why_hindsight(name: str) -> str | None:
    if name in HINDSIGHT:
        return HINDSIGHT[name]
    for prefix, why in HINDSIGHT.items():
        if prefix.endswith(".") and name.startswith(prefix):
            return why
    return None


def parse_features(text: str | Iterable[str]) -> tuple[str, ...]:
    """The features of ``--features`` (comma-separated), validated, duplicates dropped.

    Raises :class:`HindsightFeatureError` (exit 2) naming a field known only after the
    request ran, :class:`PolicyUsageError` for anything else unknown.
    """
    names = text.split(",") if isinstance(text, str) else list(text)
    out: list[str] = []
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        why = _why_hindsight(name)
        if why is not None:
            raise HindsightFeatureError(
                f"--features {name}: {name} is known only after the request ran ({why}); a "
                "policy may use route, model pair, tags.<key>, prompt_tokens, temperature and "
                "batch_size")
        if name in ("route", "pair", "model_pair"):
            continue  # always sliced by
        if name not in ALLOWED and not (name.startswith("tags.") and len(name) > 5):
            raise PolicyUsageError(
                f"--features {name}: unknown feature; a policy may use tags, tags.<key>, "
                "prompt_tokens, temperature and batch_size (route and model pair always)")
        if name not in out:
            out.append(name)
    return tuple(out)


class Buckets:
    """Half-open buckets ``[edge_i, edge_{i+1})`` over ``edges`` (ascending); a value under the
    first edge falls in the first bucket, the last bucket is open above. Labels are inclusive
    integer ranges for integer features (``"4-7"``, ``"256+"``) and ``"[0.5,1)"``-style for
    real ones.

    >>> b = Buckets((1, 2, 4, 8))
    >>> [b.label(x) for x in (1, 3, 4, 7, 9000)]
    ['1-1', '2-3', '4-7', '4-7', '8+']
    >>> b.bounds("2-3"), b.bounds("8+")
    ((2, 3), (8, None))
    >>> Buckets((0.0, 0.5, 1.0), integer=False).label(0.7)
    '[0.5,1)'
    """

    def __init__(self, edges: Sequence[float], *, integer: bool = True) -> None:
        if not edges or list(edges) != sorted(set(edges)):
            raise ValueError(f"bucket edges must be ascending and distinct, got {list(edges)!r}")
        self.edges = tuple(edges)
        self.integer = integer
        self.labels = tuple(self._make_label(i) for i in range(len(self.edges)))
        self._index = {label: i for i, label in enumerate(self.labels)}

    def _make_label(self, i: int) -> str:
        lo = self.edges[i]
        last = i == len(self.edges) - 1
        if self.integer:
            lo_i = int(lo)
            return f"{lo_i}+" if last else f"{lo_i}-{int(self.edges[i + 1]) - 1}"
        return f">={lo:g}" if last else f"[{lo:g},{self.edges[i + 1]:g})"

    def index(self, value: float) -> int:
        i = bisect_right(self.edges, value) - 1
        return i if i > 0 else 0  # not max(): a call, on the per-event path

    def label(self, value: float) -> str:
        i = bisect_right(self.edges, value) - 1
        return self.labels[i if i > 0 else 0]

    def position(self, label: str) -> int:
        """Order of a label among the buckets (unknown labels sort last)."""
        return self._index.get(label, len(self.labels))

    def bounds(self, label: str) -> tuple[int, int | None]:
        """Inclusive integer bounds of an integer bucket label (``None``: open above)."""
        i = self._index[label]
        lo = int(self.edges[i])
        if i == len(self.edges) - 1:
            return lo, None
        return lo, int(self.edges[i + 1]) - 1


def tag_slice(tags: Mapping[str, str] | None, keys: Sequence[str] | None,
              exclude: frozenset[str]) -> str:
    """The canonical text of a request's tags as a slice key: ``k=v`` pairs sorted by key,
    joined by ``&`` (``=``, ``&`` and ``%`` in keys and values percent-escaped), only the
    ``keys`` given (all but ``exclude`` when ``None``).

    >>> tag_slice({"lang": "py", "tool": "yes", "shadow": "true"}, None, frozenset({"shadow"}))
    'lang=py&tool=yes'
    >>> tag_slice({"lang": "a&b"}, ("lang",), frozenset())
    'lang=a%26b'
    >>> tag_slice(None, None, frozenset())
    ''
    """
    if not tags:
        return ""
    items = sorted(tags.items()) if keys is None else [(k, tags[k]) for k in sorted(keys)
                                                          if k in tags]
    return "&".join(f"{_esc(k)}={_esc(v)}" for k, v in items if k not in exclude)


def _esc(s: str) -> str:
    return s.replace("%", "%25").replace("&", "%26").replace("=", "%3D")


def _unesc(s: str) -> str:
    return s.replace("%3D", "=").replace("%26", "&").replace("%25", "%")


def parse_tag_slice(text: str) -> dict[str, str]:
    """The tags of a slice key, as :func:`tag_slice` wrote them.

    >>> parse_tag_slice('lang=a%26b&tool=yes')
    {'lang': 'a&b', 'tool': 'yes'}
    """
    if not text:
        return {}
    out = {}
    for part in text.split("&"):
        k, _, v = part.partition("=")
        out[_unesc(k)] = _unesc(v)
    return out
