"""How a slice is named: its model pair, the values of the chosen features, its id text.

Shared by the learning (``learn.py``) and the held-out judgement (``holdout.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from monitor.policy.features import parse_tag_slice
from monitor.policy.result import Pair
from monitor.policy.slices import SliceKey, SliceRecord

__all__ = ["SliceId", "feature_values", "pair_of", "slice_id_text"]

SliceId = tuple[str, Pair, tuple[tuple[str, str], ...]]


def pair_of(rec: SliceRecord) -> Pair:
    s = rec.series
    return Pair(s.target_model, s.target_revision, s.draft_model, s.draft_revision, s.method)


def feature_values(key: SliceKey, features: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """The slice key's values of the chosen features, in the order given.

    >>> feature_values(SliceKey("4-7", "0-255", "[0,0.01)", "lang=py&tool=yes"),
    ...                ("tags.lang", "batch_size", "tags.region"))
    (('tags.lang', 'py'), ('batch_size', '4-7'), ('tags.region', ''))
    """
    out = []
    for f in features:
        if f == "batch_size":
            out.append((f, key.batch))
        elif f == "prompt_tokens":
            out.append((f, key.prompt))
        elif f == "temperature":
            out.append((f, key.temperature))
        elif f == "tags":
            out.append((f, key.tags))
        else:  # tags.<key>; the pooled overflow slice "*" stays "*"
            out.append((f, "*" if key.tags == "*" else parse_tag_slice(key.tags).get(f[5:], "")))
    return tuple(out)


def slice_id_text(sid: SliceId) -> str:
    """``route | pair | feature=value | ...``: the slice's name in the outputs."""
    route, pair, feats = sid
    return " | ".join([route, pair.label, *(f"{k}={v}" for k, v in feats)])
