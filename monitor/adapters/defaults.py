"""What engine outputs do not say: route, model names, revisions, tokenizers, draft length and
drafting method, from command-line flags and a per-model mapping file.

Mapping file (YAML), keyed by served model name (the engine's ``model`` field, or
``--target-model`` for outputs that do not name their model)::

    llama-3.1-70b-instruct:
      route: code-assistant
      target_revision: "2026-10-28"
      target_tokenizer: llama3
      draft_model: llama-3.2-1b-instruct
      draft_revision: "2026-09-30"
      draft_tokenizer: llama3
      num_speculative_tokens: 5
      method: draft_model

Keys are the flag names with ``_`` for ``-``. An entry overrides the flags for its model (the
specific beats the general); the flags fill in what it leaves out; ``target_model`` defaults
to the served name. Values the engine itself reports (model name, draft length) win over the
flags; only an entry's own ``target_model`` renames a served model. ``null`` clears a flag for
one model (``draft_model: null`` for an n-gram model under a global ``--draft-model``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import date
from pathlib import Path
from typing import Any

import yaml

from monitor.exceptions import SpecwatchError

__all__ = ["FIELDS", "Defaults", "MappingError", "load_mapping"]


class MappingError(SpecwatchError):
    """The mapping file is unreadable or has an unknown key or bad value; names the key path."""


@dataclass(frozen=True, slots=True)
class Defaults:
    """Descriptive fields for every request, plus per-model overrides in ``models``."""

    route: str | None = None
    target_model: str | None = None
    target_revision: str | None = None
    target_tokenizer: str | None = None
    draft_model: str | None = None
    draft_revision: str | None = None
    draft_tokenizer: str | None = None
    pinned_target_revision: str | None = None
    num_speculative_tokens: int | None = None
    method: str | None = None
    instance: str | None = None
    # Engine ids are unique per engine process at best (TensorRT-LLM counts from 1 on every
    # start), while dedup is fleet-wide: a prefix such as the pod name keeps them apart.
    request_id_prefix: str = ""
    models: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # Where ts comes from when the engine output has no wall-clock time; tests pin it.
    clock: Callable[[], float] = time.time

    @property
    def speculation_configured(self) -> bool:
        """Whether the flags or mapping describe speculative decoding for this model."""
        return (self.num_speculative_tokens is not None or self.draft_model is not None
                or self.method is not None)

    def for_model(self, served: str | None) -> Defaults:
        """These defaults with the mapping entry of the request's model laid over them.

        ``served`` is the model name the engine output gives (None when it names none, as
        SGLang's /generate); ``target_model`` stands in for it then. The target model is the
        entry's ``target_model``, else the served name, else ``target_model``: a name the
        engine reports wins over the flag, as everything the engine reports does.

        >>> d = Defaults(route="chat", target_model="m", models={"m": {"route": "code"}})
        >>> (d.for_model(None).route, d.for_model(None).target_model)
        ('code', 'm')
        >>> (d.for_model("other").route, d.for_model("other").target_model)
        ('chat', 'other')
        """
        name = served or self.target_model
        entry = self.models.get(name) if name is not None else None
        merged = replace(self, **entry) if entry else self
        target = (entry or {}).get("target_model") or name
        return merged if merged.target_model == target else replace(merged, target_model=target)


# The keys a mapping entry may set, with their types.
FIELDS: dict[str, type] = {
    f.name: (int if f.name == "num_speculative_tokens" else str)
    for f in fields(Defaults) if f.name not in ("models", "clock", "request_id_prefix")
}


def load_mapping(path: str | Path) -> dict[str, dict[str, Any]]:
    """The per-model entries of a mapping file; ``MappingError`` names the bad key path."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise MappingError(f"mapping file {path}: {e.strerror or e}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise MappingError(f"mapping file {path}: invalid YAML: {e}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise MappingError(f"mapping file {path}: want model name -> settings, got "
                           f"{type(doc).__name__}")
    out: dict[str, dict[str, Any]] = {}
    for model, entry in doc.items():
        where = f"mapping error at {model}"
        if not isinstance(model, str) or not model:
            raise MappingError(f"mapping file {path}: model names must be strings "
                               f"(got {model!r})")
        if not isinstance(entry, dict):
            raise MappingError(f"{where}: want a mapping of settings, got "
                               f"{type(entry).__name__}")
        out[model] = {key: _value(f"{where}.{key}", key, value) for key, value in entry.items()}
    return out


def _value(where: str, key: object, value: object) -> Any:
    kind = FIELDS.get(key) if isinstance(key, str) else None
    if kind is None:
        raise MappingError(f"{where}: unknown key (known: {', '.join(FIELDS)})")
    if value is None:
        return None  # "none for this model", e.g. draft_model: null under a global --draft-model
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise MappingError(f"{where}: must be an integer >= 1 (got {value!r})")
        return value
    if isinstance(value, date):
        # YAML reads an unquoted 2026-10-28 as a date; a revision is meant
        return value.isoformat()
    if not isinstance(value, str) or not value:
        raise MappingError(f"{where}: must be a non-empty string (got {value!r})")
    return value
