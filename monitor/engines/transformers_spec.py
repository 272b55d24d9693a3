"""Per-request speculative-decoding counts from Hugging Face transformers' ``generate()``.

transformers' assisted generation (prompt lookup, a draft model, a draft model with another
tokenizer, early exit) verifies drafts but reports no acceptance. :class:`SpecCounter` counts
it for one model, per request:

- ``generate()`` builds a candidate generator for each call (``_get_candidate_generator``);
  the counter wraps that one object: ``get_candidates`` tells how many tokens were drafted
  for the next verification step, ``update_candidate_strategy`` (called once per step, with
  the number of drafts the target kept) closes the step. Only the object is wrapped, never a
  class, so nothing else in the process changes and an implementation calling its parent's
  method is still counted once;
- a forward hook on the target counts its forward passes, an independent witness: under
  greedy decoding every target pass emits the drafts it accepted plus one token of its own,
  so ``new tokens == accepted + target forward passes``. :meth:`RequestCounts.check` asserts
  it on every request (and it holds without speculation too: one pass per token). It cannot
  hold for early exit, whose drafts run through the same module.

Usage (one ``generate()`` at a time per counter, as transformers' assisted generation only
runs with batch size 1)::

    counter = SpecCounter(model)
    t0 = time.time()
    with counter.request() as counts:
        out = model.generate(**enc, do_sample=False, max_new_tokens=48,
                             prompt_lookup_num_tokens=10)
    new_tokens = out.shape[1] - enc["input_ids"].shape[1]
    counts.check(new_tokens)                       # raises CountMismatch
    publisher.publish(counts.event(
        request_id="r-1", route="code", ts=time.time(), e2e_ms=(time.time() - t0) * 1000,
        output_tokens=new_tokens, target=ModelId("SmolLM2-135M", rev, tok),
        num_speculative_tokens=10, method="ngram"))
    counter.close()

Counted as in telemetry v1: ``drafted_tokens`` is every token a step proposed (prompt lookup
proposes nothing when it finds no match: such a step drafts 0 and the target decodes one
token), ``accepted_tokens`` the drafts the target kept (the bonus token excluded; cropped at
EOS and at the length limit as transformers does), ``verify_steps`` every target verification
pass, so ``1 + accepted / verify_steps`` is tokens per target pass. Tested against transformers
5.24 (tests/monitor/engines/test_transformers_live.py).

:func:`gguf_identity` gives a GGUF file's revision (``sha256:`` of the file) and tokenizer
fingerprint (``gguf:<model>/<pre>/n<vocab>/tok-sha256:<16 hex>``, the sha256 of the token list
with each token NUL-terminated), the ids the recorded real-engine runs use.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from monitor.exceptions import SpecwatchError
from monitor.telemetry.serialize import format_ts, request_tail, spec_block

__all__ = ["CountMismatch", "ModelId", "RequestCounts", "SpecCounter", "gguf_identity"]

_FACTORY = "_get_candidate_generator"


class CountMismatch(SpecwatchError):
    """A request's counts contradict its output: the counting is wrong, not the engine."""


@dataclass(frozen=True, slots=True)
class ModelId:
    """What telemetry v1 says of a model: name, revision, tokenizer."""

    model: str
    revision: str
    tokenizer: str

    def as_dict(self) -> dict[str, str]:
        return {"model": self.model, "revision": self.revision, "tokenizer": self.tokenizer}


@dataclass(slots=True)
class RequestCounts:
    """The counts of one ``generate()`` call.

    >>> c = RequestCounts(drafted=12, accepted=5, verify_steps=4, target_forwards=4)
    >>> c.check(9)
    >>> c.check(10)
    Traceback (most recent call last):
    ...
    monitor.engines.transformers_spec.CountMismatch: 10 new tokens, but 5 accepted drafts + \
4 target forward passes = 9
    """

    drafted: int = 0
    accepted: int = 0
    verify_steps: int = 0
    target_forwards: int = 0
    _pending: int = field(default=0, repr=False)

    def check(self, new_tokens: int) -> None:
        """Greedy decoding: every target pass emits its accepted drafts plus one token."""
        if new_tokens != self.accepted + self.target_forwards:
            raise CountMismatch(f"{new_tokens} new tokens, but {self.accepted} accepted drafts "
                                f"+ {self.target_forwards} target forward passes = "
                                f"{self.accepted + self.target_forwards}")
        if self.accepted > self.drafted:
            raise CountMismatch(f"{self.accepted} accepted > {self.drafted} drafted")

    def event(
        self,
        *,
        request_id: str,
        route: str,
        ts: float,
        e2e_ms: float,
        output_tokens: int,
        target: ModelId,
        num_speculative_tokens: int | None,
        method: str | None = None,
        draft: ModelId | None = None,
        params: Mapping[str, Any] | None = None,
        prompt_tokens: int | None = None,
        ttft_ms: float | None = None,
        temperature: float | None = None,
        instance: str | None = None,
        engine: str = "transformers",
    ) -> dict[str, Any]:
        """This request as a telemetry v1 event; ``num_speculative_tokens`` None means the
        request ran without speculation (no ``spec``, no ``draft``)."""
        event: dict[str, Any] = {
            "request_id": request_id,
            "ts": format_ts(ts),
            "route": route,
            "status": "ok",
            "target": target.as_dict(),
        }
        if num_speculative_tokens is not None:
            if draft is not None:
                event["draft"] = draft.as_dict()
            spec = spec_block(num_speculative_tokens, self.drafted, self.accepted,
                              self.verify_steps, None, method)
            if params:
                spec["params"] = dict(params)
            event["spec"] = spec
        return request_tail(event, output_tokens=output_tokens, e2e_ms=e2e_ms,
                            prompt_tokens=prompt_tokens, ttft_ms=ttft_ms,
                            temperature=temperature, instance=instance, engine=engine)


class SpecCounter:
    """Counts drafted/accepted tokens, verification steps and target forward passes of one
    transformers model, per :meth:`request`. ``close()`` (or ``with``) undoes the wrapping."""

    def __init__(self, model: Any) -> None:
        factory = getattr(model, _FACTORY, None)
        if factory is None or not callable(factory):
            raise SpecwatchError(f"{type(model).__name__} has no {_FACTORY}: this transformers "
                                 "version builds candidate generators differently")
        self._model = model
        self._own_attr = _FACTORY in vars(model)  # an instance attribute we must put back
        self._saved = vars(model).get(_FACTORY)
        self._current: RequestCounts | None = None

        def build(*args: Any, **kwargs: Any) -> Any:
            generator = factory(*args, **kwargs)
            self._wrap(generator)
            return generator

        setattr(model, _FACTORY, build)
        self._hook = model.register_forward_hook(self._forward)

    @contextmanager
    def request(self) -> Iterator[RequestCounts]:
        """Count everything ``generate()`` does inside the block into a fresh object."""
        if self._current is not None:
            raise SpecwatchError("one request at a time per SpecCounter")
        counts = RequestCounts()
        self._current = counts
        try:
            yield counts
        finally:
            self._current = None

    def close(self) -> None:
        self._hook.remove()
        if self._own_attr:
            setattr(self._model, _FACTORY, self._saved)
        else:
            vars(self._model).pop(_FACTORY, None)

    def __enter__(self) -> SpecCounter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the counting ------------------------------------------------------------------------

    def _forward(self, module: Any, args: Any, output: Any) -> None:
        if self._current is not None:
            self._current.target_forwards += 1

    def _wrap(self, generator: Any) -> None:
        get_candidates = generator.get_candidates
        update = generator.update_candidate_strategy

        def counted_get_candidates(input_ids: Any, *args: Any, **kwargs: Any) -> Any:
            candidates, logits = get_candidates(input_ids, *args, **kwargs)
            if self._current is not None:
                self._current._pending = int(candidates.shape[1] - input_ids.shape[1])
            return candidates, logits

        def counted_update(input_ids: Any, scores: Any, num_matches: Any) -> Any:
            counts = self._current
            if counts is not None:
                counts.drafted += counts._pending
                counts.accepted += int(num_matches)
                counts.verify_steps += 1
                counts._pending = 0
            return update(input_ids, scores, num_matches)

        generator.get_candidates = counted_get_candidates
        generator.update_candidate_strategy = counted_update


@dataclass(frozen=True, slots=True)
class GgufIdentity:
    revision: str
    tokenizer: str
    vocab_size: int


def gguf_identity(path: str | Path) -> GgufIdentity:
    """Revision and tokenizer fingerprint of a GGUF file (needs the ``gguf`` package)."""
    from gguf import GGUFReader

    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    fields = GGUFReader(str(path)).fields

    def text(name: str) -> str:
        f = fields.get(name)
        return "default" if f is None else bytes(f.parts[f.data[0]]).decode("utf-8")

    tokens = fields["tokenizer.ggml.tokens"]
    token_list = hashlib.sha256()
    for i in tokens.data:
        token_list.update(bytes(tokens.parts[i]))
        token_list.update(b"\0")
    n = len(tokens.data)
    return GgufIdentity(
        revision=f"sha256:{digest.hexdigest()}",
        tokenizer=(f"gguf:{text('tokenizer.ggml.model')}/{text('tokenizer.ggml.pre')}/n{n}"
                   f"/tok-sha256:{token_list.hexdigest()[:16]}"),
        vocab_size=n,
    )
