"""Hostile input end to end: strings and bytes a producer could send, and what they must
not do anywhere downstream (the parser, the store, the API, /metrics, Slack, the report).

Shared here: the corpus of hostile fragments, the hypothesis strategies built from it, and
a pipeline that counts events carrying such names into a real store.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from monitor.aggregate.guard import CardinalityGuard
from monitor.config import IngestConfig
from monitor.deadletter import CountingDeadLetter
from monitor.metrics import IngestMetrics
from monitor.pipeline import Pipeline
from monitor.store.checkpoint import Checkpoint
from monitor.store.store import Store
from monitor.telemetry.parse import MAX_ID_CHARS, MAX_NAME_CHARS

__all__ = [
    "FRAGMENTS", "MAX_ID_CHARS", "MAX_NAME_CHARS", "NAME_FIELDS", "NASTY", "RAW_BREAKERS",
    "T0", "count_into", "event", "hostile_text", "long_text", "names",
]

CONTROL = [chr(c) for c in range(0x20)] + ["\x7f", "\x85", "\u2028", "\u2029"]
BIDI = ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068",
        "\u2069", "\u200e", "\u200f", "\u061c"]
ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff"]
COMBINING = ["\u0301", "\u0308", "\u0336", "\u20dd", "\u0489"]
SCRIPTS = ["مسار", "שלום", "العربية", "🚀", "👩‍💻", "🇫🇷", "𝕏", "\U0010fffd", "\uffff",
           "ｆｕｌｌ", "ǅ", "İ", "ß"]
FRAGMENTS = [
    # SQL
    "'; DROP TABLE rollups; --", '" OR 1=1', "' OR '1'='1", "%_\\", "\\'", "/*", "*/",
    # HTML / JS
    "<script>alert(1)</script>", '"><img src=x onerror=alert(1)>', "javascript:alert(1)",
    "<!--", "-->", "]]>", "<svg onload=alert(1)>", "&amp;", "&lt;", "&#x3c;",
    # Slack mrkdwn
    "<!channel>", "<!here>", "<!everyone>", "<@U123>", "<#C123>", "*bold*", "_it_", "~s~",
    "`code`", "```", "<https://evil.test|docs>", "<mailto:x@evil.test|x>", ">quote",
    # Prometheus text format and JSON
    '"', "\\", "\\n", "\n", "}", "{", '\\"', "]", "[", ",", "=", "# HELP x", "# TYPE x gauge",
    "\\u0000", "\\ud800", "null", "NaN",
    # CSV formulas, templates, format strings, mathtext
    "=1+1", "+1", "-1", "@SUM(A1)", "=cmd|' /C calc'!A0", "{{7*7}}", "${jndi:ldap://x}",
    "%s%n", "$x$",
    # terminals and our own sentinels
    "\x1b[31m", "\x1b]8;;http://evil.test\x07", "\r\n", "__overflow__", "\uffff0",
]
NASTY = CONTROL + BIDI + ZERO_WIDTH + COMBINING + SCRIPTS + FRAGMENTS

# Bytes inside a JSON string that no valid message holds: lone surrogate escapes, invalid
# UTF-8 (stray continuation, overlong, CESU-8 surrogate, beyond U+10FFFF, truncated), raw
# control bytes JSON requires escaped.
RAW_BREAKERS = [
    b"\\ud800", b"\\udfff", b"\\udc00\\ud800", b"\\ud83d", b"\xff", b"\x80", b"\xc0\xaf",
    b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\x00", b"\x1f", b"\n\x00",
]

T0 = 1_792_999_980.0  # 2026-10-26, on a minute boundary

_atom = st.sampled_from(NASTY) | st.text(max_size=3)


def hostile_text(min_size: int = 1, max_size: int = MAX_ID_CHARS) -> st.SearchStrategy[str]:
    """Concatenations of hostile fragments and arbitrary text (never a lone surrogate,
    which no JSON message can carry; see :data:`RAW_BREAKERS`), ``min_size..max_size``
    characters, biased to the edges of the range."""
    def fit(parts: list[str], size: int) -> str:
        s = "".join(parts) or "x"
        return (s * (size // len(s) + 1))[:size]

    sizes = st.sampled_from(sorted({min_size, max_size, max(min_size, max_size - 1)})) \
        | st.integers(min_size, max_size)
    return st.builds(fit, st.lists(_atom, min_size=1, max_size=8), sizes)


def long_text(limit: int) -> st.SearchStrategy[str]:
    """Over ``limit`` characters: just over, and far over (up to 50,000)."""
    return hostile_text(limit + 1, limit + 2) | hostile_text(limit + 1, 50_000)


NAME_FIELDS = ("route", "target.model", "target.revision", "target.tokenizer", "draft.model",
               "draft.revision", "draft.tokenizer", "spec.method")


def names(max_id: int = MAX_ID_CHARS, max_name: int = MAX_NAME_CHARS
          ) -> st.SearchStrategy[dict[str, str]]:
    """One hostile value per :data:`NAME_FIELDS` entry, each within the telemetry limits."""
    return st.fixed_dictionaries({
        f: hostile_text(1, max_id if f == "route" else max_name) for f in NAME_FIELDS
    })


def event(fields: dict[str, str], i: int = 0, **extra: Any) -> dict[str, Any]:
    """A valid event whose name fields are ``fields`` (dotted, as in :data:`NAME_FIELDS`)."""
    doc: dict[str, Any] = {
        "request_id": f"h-{i}", "ts": T0 + i, "route": "r",
        "target": {"model": "t", "revision": "1", "tokenizer": "tok"},
        "draft": {"model": "d", "revision": "1", "tokenizer": "tok"},
        "spec": {"num_speculative_tokens": 2, "drafted_tokens": 10, "accepted_tokens": 6,
                 "accepted_per_position": [4, 2], "verify_steps": 5},
        "output_tokens": 12, "e2e_ms": 300.0, "ttft_ms": 40.0, **extra,
    }
    for path, value in fields.items():
        *parents, leaf = path.split(".")
        node = doc
        for p in parents:
            node = node[p]
        node[leaf] = value
    return doc


def count_into(store: Store, source: str, docs: Iterable[dict[str, Any]],
               registry: CollectorRegistry | None = None, config: IngestConfig | None = None,
               **pipeline_args: Any) -> tuple[Pipeline, CountingDeadLetter, list[Checkpoint]]:
    """Run ``docs`` (one message each) through a guarded pipeline into ``store`` and
    checkpoint; returns the pipeline, its dead letters and the committed checkpoints."""
    registry = registry if registry is not None else CollectorRegistry()
    config = config if config is not None else IngestConfig()
    guard = CardinalityGuard(store, config.max_series_per_route, config.max_series, registry)
    commits: list[Checkpoint] = []
    dead = CountingDeadLetter()
    on_commit = [commits.append, *pipeline_args.pop("on_commit", [])]
    p = Pipeline(store, source, config, IngestMetrics(registry), dead, guard=guard,
                 on_commit=on_commit, **pipeline_args)
    p.assign([0])
    for offset, doc in enumerate(docs):
        p.process(0, offset, orjson.dumps(doc))
    assert p.checkpoint()
    return p, dead, commits
