"""``specwatch adapt``: engine per-request outputs (JSON lines) to telemetry v1 JSON lines."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any

from monitor.exceptions import SpecwatchError

__all__ = ["cmd_adapt", "register"]

_DESCRIPTION = """\
Read one engine request output per line (a JSON array of them also works) and write one
telemetry v1 event per request, ready for `specwatch replay` or Kafka. Requests that cannot be
adapted go to the dead letter with the reason (the field path in the engine output); the
others are still written.

what each --from reads:
  vllm    an OpenAI-compatible response with `metrics` (--enable-per-request-metrics) and
          `metrics.speculative_decoding` (--per-request-spec-decode-metrics summary|detailed),
          or an offline RequestOutput as JSON (request_id, outputs, metrics)
  sglang  a native /generate response: {"text": ..., "meta_info": {...}}
  trtllm  an LLM API RequestOutput as JSON with outputs[0].request_perf_metrics, or a
          trtllm-serve OpenAI response (choices[].speculative_decoding) carrying the
          request's /perf_metrics entry's `perf_metrics` for timing
  llamacpp  a llama-server /v1/chat/completions, /v1/completions or native /completion
          response with `timings` (draft_n / draft_n_accepted appear only when something
          was drafted); draft length and method from the flags or --mapping
  record  a recorded real-engine request (flat: runtime, run, route, models, tokenizer ids,
          spec_type, spec_params, drafted/accepted/output tokens, latency_s), e.g.
          shared/data/real-engine-events.jsonl; it names its own models and tokenizers,
          its route becomes <run>/<route>, and records without ts run back to back from
          --default-ts

request_id is the engine's id (plus --request-id-prefix); ts is the engine's finish time
(arrival + latency where only the arrival is given), else the adapt time with an
`adapter_note` on the event; ttft_ms and e2e_ms come from the engine's timing fields.
"""

_EPILOG = """\
fields the engine output lacks come from the flags or from --mapping, a YAML file keyed by
served model name (the engine's `model` field, or --target-model when the output names none):

  llama-3.1-70b-instruct:
    route: code-assistant
    target_revision: "2026-10-28"
    target_tokenizer: llama3
    draft_model: llama-3.2-1b-instruct
    draft_revision: "2026-09-30"
    draft_tokenizer: llama3
    num_speculative_tokens: 5     # SGLang never reports it
    method: draft_model

keys are the flag names with _ for -; a model's entry overrides the flags, the flags fill in
the rest; target_model defaults to the served name; a model name or draft length the engine
reports wins over the flags.
Speculation is taken as on for a model with num_speculative_tokens, draft_model or method set:
then an output without speculative stats is a request that drafted nothing (SGLang,
TensorRT-LLM leave them out) or is rejected as unknown (vLLM sends null when it cannot say).
"""

_FIELD_FLAGS = (
    ("--route", "route", "serving route of every request"),
    ("--target-model", "target_model",
     "target model of outputs that name none (SGLang /generate, RequestOutput), and their "
     "--mapping key; a model name in the output wins"),
    ("--target-revision", "target_revision", "target model revision"),
    ("--target-tokenizer", "target_tokenizer", "target tokenizer id"),
    ("--draft-model", "draft_model", "draft model name (none for n-gram/EAGLE heads without one)"),
    ("--draft-revision", "draft_revision", "draft model revision"),
    ("--draft-tokenizer", "draft_tokenizer", "draft tokenizer id"),
    ("--pinned-target-revision", "pinned_target_revision",
     "target revision the draft was validated against"),
    ("--method", "method", "drafting method: draft_model, ngram, eagle, mtp, medusa, ..."),
    ("--instance", "instance", "engine replica / pod name"),
)


def _when(text: str) -> float:
    """Unix seconds of an RFC 3339 time with zone, or of a number of Unix seconds.

    >>> _when("2026-11-02T14:03:07Z"), _when("1793628187.5")
    (1793628187.0, 1793628187.5)
    """
    try:
        return float(text)
    except ValueError:
        pass
    try:
        t = datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        t = None
    if t is None or t.tzinfo is None:
        raise argparse.ArgumentTypeError(f"cannot read time {text!r} (want RFC 3339 with zone, "
                                         "e.g. 2026-11-02T14:00:00Z, or Unix seconds)")
    return t.timestamp()


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not >= 1")
    return value


def register(sub: Any, with_config: Callable[[argparse.ArgumentParser], None] | None = None,
             config: Callable[[argparse.Namespace], Any] | None = None) -> None:
    """Add ``adapt`` to the ``specwatch`` subparsers; ``args.func(args)`` runs it.

    ``with_config``/``config`` are accepted for the common registration signature; adapt
    reads no configuration and touches no database.
    """
    from monitor.adapters import ADAPTERS

    p = sub.add_parser(
        "adapt", help="convert vLLM / SGLang / TensorRT-LLM / llama.cpp request outputs (or "
        "recorded requests) to telemetry v1",
        description=_DESCRIPTION, epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--from", dest="engine", required=True, choices=sorted(ADAPTERS),
                   help="the engine whose output INPUT holds")
    p.add_argument("input", nargs="?", default="-", metavar="INPUT",
                   help="JSON lines file (.gz too), or - for stdin (the default)")
    p.add_argument("--out", default="-", metavar="PATH",
                   help="telemetry v1 JSON lines (.gz compresses; replaced if it exists), "
                        "or - for stdout (the default)")
    p.add_argument("--dead-letter", default="-", metavar="PATH",
                   help="rejected outputs with reasons, JSON lines (default: - for stderr)")
    p.add_argument("--mapping", metavar="FILE", help="per-model fields, YAML (see below)")
    for flag, dest, text in _FIELD_FLAGS:
        p.add_argument(flag, dest=dest, metavar=dest.split("_")[-1].upper(), help=text)
    p.add_argument("--num-speculative-tokens", type=_positive, metavar="K",
                   help="draft length per step, when the engine does not report it")
    p.add_argument("--request-id-prefix", default="", metavar="PREFIX",
                   help="prepended to every request id: engine ids are unique per process at "
                        "best (TensorRT-LLM counts from 1), dedup is fleet-wide")
    p.add_argument("--default-ts", type=_when, metavar="TIME",
                   help="ts for outputs with no wall-clock time, RFC 3339 or Unix seconds "
                        "(default: the adapt time); such events carry an adapter_note")
    p.set_defaults(func=cmd_adapt)


def cmd_adapt(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from monitor.adapters import ADAPTERS, SELF_DESCRIBED
    from monitor.adapters.defaults import Defaults, load_mapping
    from monitor.adapters.driver import adapt_lines, open_lines, open_out
    from monitor.config import KafkaConfig
    from monitor.deadletter import FileDeadLetter

    models = load_mapping(args.mapping) if args.mapping else {}
    if not models and args.engine not in SELF_DESCRIBED:
        # Without a mapping every request would be rejected for the same missing flag: say
        # so once, before reading anything.
        missing = [flag for flag, dest in (("--route", "route"),
                                           ("--target-revision", "target_revision"),
                                           ("--target-tokenizer", "target_tokenizer"))
                   if getattr(args, dest) is None]
        if missing:
            raise SpecwatchError(f"adapt: {', '.join(missing)} required without --mapping "
                                 "(the engine output does not say)")
    if args.draft_model is not None and (args.draft_revision is None
                                         or args.draft_tokenizer is None):
        raise SpecwatchError("adapt: --draft-model needs --draft-revision and --draft-tokenizer")
    defaults = Defaults(
        **{dest: getattr(args, dest) for _, dest, _ in _FIELD_FLAGS},
        num_speculative_tokens=args.num_speculative_tokens,
        request_id_prefix=args.request_id_prefix, models=models,
    )
    if args.default_ts is not None:
        fixed = args.default_ts
        defaults = replace(defaults, clock=lambda: fixed)
    # Cut as on the dead-letter topic: a huge line is not copied whole into the file.
    dead_letter = FileDeadLetter(args.dead_letter,
                                 max_raw_bytes=KafkaConfig().dead_letter_max_bytes)
    try:
        with open_lines(args.input) as lines, open_out(args.out) as out:
            summary = adapt_lines(lines, ADAPTERS[args.engine], defaults, out.write,
                                  dead_letter, {"file": args.input, "engine": args.engine})
    except OSError as e:
        raise SpecwatchError(f"adapt: {e.filename or args.input}: {e.strerror or e}") from None
    finally:
        dead_letter.close()
    print(f"adapt {args.engine} {args.input}: {summary.line()}", file=sys.stderr)
    return 0
