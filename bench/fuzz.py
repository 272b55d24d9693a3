"""Coverage-guided fuzzing of the parser and the aggregation (atheris, libFuzzer's engine).

Run from the repo root::

    python bench/fuzz.py --runs 200000                 # bounded by iterations
    python bench/fuzz.py --seconds 300                 # bounded by time
    python bench/fuzz.py --runs 1000 --corpus DIR      # another corpus directory

Each input becomes one telemetry message in one of three shapes, chosen by its first byte:
the bytes as they are; a valid event whose name fields (route, models, revisions,
tokenizers, method) are the input's chunks, written by ``json.dumps`` so that lone
surrogates arrive as ``\\udXXX`` escapes; or JSON lines mixing both. The message goes
through :class:`~monitor.telemetry.parse.Parser` and a :class:`~monitor.pipeline.Pipeline`
with a :class:`~monitor.aggregate.guard.CardinalityGuard` over an in-memory store, and these
must hold (any exception is a crash, which libFuzzer saves as ``crash-<sha1>``):

- the parser never raises, and no rejection is an "internal error"; every rejection is
  dead-lettered as one JSON record;
- a valid event parses back to itself from its own serialisation; a structured event with
  names within the limits comes back with exactly those names, one over a limit (or holding
  a lone surrogate) is rejected;
- after each checkpoint the store holds exactly the requests the pipeline counted, each
  bucket has accepted <= drafted tokens, and the guard's caps hold;
- every so often the rollup counters render an exposition that parses back.

The parent process runs the fuzzer in a child (libFuzzer ends its process when done), then
prints one line: engine, iterations, seconds, crashes, corpus size. The exit status is 1
when a crash was found. ``SPECWATCH_FUZZ_PLANT=1`` plants a bug (an input starting with
``PLANTED`` raises) so that a test can see a crash being found.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_CORPUS = ROOT / "bench" / "out" / "fuzz" / "corpus"  # bench/out is git-ignored
CHECKPOINT_EVERY = 64
RESET_EVERY = 4096  # a fresh store and pipeline: memory stays bounded over long runs
EXPOSE_EVERY = 512
PER_ROUTE, TOTAL = 4, 32  # small caps, so that fuzzing reaches the overflow paths
NAMES = ("route", "target.model", "target.revision", "target.tokenizer", "draft.model",
         "draft.revision", "draft.tokenizer", "spec.method")
SEPARATOR = b"\xfe"


# -- seeds ------------------------------------------------------------------------------------

def template(i: int = 0) -> dict[str, Any]:
    return {
        "request_id": f"f-{i}", "ts": "2026-11-02T14:03:07.412Z", "route": "chat",
        "target": {"model": "m70b", "revision": "r1", "tokenizer": "tok"},
        "draft": {"model": "m1b", "revision": "d1", "tokenizer": "tok",
                  "pinned_target_revision": "r1"},
        "spec": {"num_speculative_tokens": 3, "drafted_tokens": 30, "accepted_tokens": 20,
                 "verify_steps": 10, "accepted_per_position": [9, 7, 4], "method": "eagle"},
        "output_tokens": 40, "e2e_ms": 900.0, "ttft_ms": 80.0,
    }


def seeds() -> dict[str, bytes]:
    """A small starting corpus: valid shapes, the spec's edge cases, hostile names."""
    one = json.dumps(template()).encode()
    out = {
        "event": b"\x00" + one,
        "batch": b"\x00" + json.dumps([template(1), template(2)]).encode(),
        "lines": b"\x00" + one + b"\n" + json.dumps(template(3)).encode() + b"\r\n",
        "no-spec": b"\x00" + json.dumps({k: v for k, v in template(4).items()
                                        if k not in ("spec", "draft")}).encode(),
        "unix-ts": b"\x00" + json.dumps({**template(5), "ts": 1793628187.5}).encode(),
        "garbage": b"\x00{\"request_id\": [1, {\"x\": NaN}], ",
        "deep": b"\x00" + b"[" * 300 + b"]" * 300,
    }
    hostile = ["<script>alert(1)</script>", "'; DROP TABLE rollups; --", "<!channel>",
               "\u202eevil\u2066", "a\x00b\nc\u2028", "🚀👩‍💻", "x" * 129, "\ud800", '"}\\{',
               "=1+1", "__overflow__", "e\u0301\u0301"]
    for i, name in enumerate(hostile):
        chunks = [name.encode("utf-8", "surrogatepass")] * len(NAMES)
        out[f"names-{i}"] = b"\x01" + SEPARATOR.join(chunks)
    out["mixed"] = b"\x02" + one + SEPARATOR + "مسار".encode()
    return out


def write_seeds(corpus: Path) -> int:
    corpus.mkdir(parents=True, exist_ok=True)
    if not any(corpus.iterdir()):
        for name, data in seeds().items():
            (corpus / f"seed-{name}").write_bytes(data)
    return sum(1 for p in corpus.iterdir() if p.is_file())


# -- the target --------------------------------------------------------------------------------

class _Store:
    """Just enough of the store for a pipeline and a guard, in memory."""

    def __init__(self) -> None:
        from monitor.store.checkpoint import PartitionState

        self._state = PartitionState
        self.rollups: dict[Any, Any] = {}
        self.offsets: dict[int, int] = {}

    def commit(self, cp: Any) -> None:
        from monitor.aggregate.bucket import BucketStats

        for pc in cp.partitions:
            self.offsets[pc.partition] = pc.next_offset
        for key, delta in cp.rollups.items():
            self.rollups.setdefault(key, BucketStats()).merge(delta)

    def load_partitions(self, source: str, partitions: Any) -> dict[int, Any]:
        return {p: self._state(self.offsets[p]) for p in partitions if p in self.offsets}

    def load_state(self, source: str, prefix: str = "") -> dict[str, Any]:
        return {}

    def series_keys(self, keys: Any = None) -> set[Any]:
        stored = {k for k, _ in self.rollups}
        return stored if keys is None else stored & set(keys)


class _DeadLetters:
    """Every rejection must make a dead-letter record that serialises."""

    def __init__(self) -> None:
        self.count = 0

    def send(self, rejection: Any, origin: dict[str, Any]) -> None:
        import orjson

        from monitor.deadletter import dead_letter_record

        orjson.dumps(dead_letter_record(rejection, origin, 4096))
        self.count += 1

    def flush(self) -> None:
        return

    def close(self) -> None:
        return


class Target:
    """The fuzzed code and its invariants; one instance per fuzzing process."""

    def __init__(self) -> None:
        from monitor.telemetry.parse import Parser

        self.parser = Parser(max_message_bytes=1 << 16)
        self.inputs = 0
        self.plant = os.environ.get("SPECWATCH_FUZZ_PLANT") == "1"
        self._reset()

    def _reset(self) -> None:
        from prometheus_client import CollectorRegistry

        from monitor.aggregate.guard import CardinalityGuard
        from monitor.config import IngestConfig
        from monitor.exposition import RollupCounters
        from monitor.metrics import IngestMetrics
        from monitor.pipeline import Pipeline

        self.store = _Store()
        self.registry = CollectorRegistry()
        self.guard = CardinalityGuard(self.store, PER_ROUTE, TOTAL, self.registry)
        self.counters = RollupCounters(self.registry)
        self.pipeline = Pipeline(self.store, "fuzz", IngestConfig(), IngestMetrics(self.registry),
                                 _DeadLetters(), guard=self.guard,
                                 on_commit=[self.counters.observe])
        self.pipeline.assign([0])
        self.offset = 0

    def __call__(self, data: bytes) -> None:
        self.inputs += 1
        if self.plant and data.startswith(b"PLANTED"):
            raise RuntimeError("planted bug")
        mode = data[0] % 3 if data else 0
        body = data[1:]
        expect: tuple[dict[str, str], bool] | None = None
        if mode == 1:
            raw, expect = self._structured(body)
        elif mode == 2:
            head, _, tail = body.partition(SEPARATOR)
            raw = head + b"\n" + self._structured(tail)[0] + b"\n" + head
        else:
            raw = body
        self._parse(raw, expect)
        self._aggregate(raw)

    @staticmethod
    def _structured(body: bytes) -> tuple[bytes, tuple[dict[str, str], bool]]:
        """A valid event whose names are the input's chunks, and whether it should parse."""
        from monitor.telemetry.parse import MAX_ID_CHARS, MAX_NAME_CHARS

        chunks = body.split(SEPARATOR)
        doc = template()
        names: dict[str, str] = {}
        ok = True
        for i, path in enumerate(NAMES):
            text = chunks[i % len(chunks)].decode("utf-8", "surrogateescape")
            parent, leaf = path.split(".") if "." in path else ("", path)
            (doc[parent] if parent else doc)[leaf] = text
            names[path] = text
            limit = MAX_ID_CHARS if path == "route" else MAX_NAME_CHARS
            low = 0 if path == "spec.method" else 1
            lone = any("\ud800" <= c <= "\udfff" for c in text)
            ok &= low <= len(text) <= limit and not lone
        return json.dumps(doc).encode(), (names, ok)

    def _parse(self, raw: bytes, expect: tuple[dict[str, str], bool] | None) -> None:
        import orjson

        from monitor.telemetry.serialize import event_to_dict

        events, rejections = self.parser.parse(raw)
        for r in rejections:
            assert r.reason and not r.reason.startswith("internal error"), r.reason
        for e in events:
            assert 0 < len(e.route) <= 128 and 0 <= e.accepted_tokens <= e.drafted_tokens
            again, bad = self.parser.parse(orjson.dumps(event_to_dict(e)))
            assert again == [e] and not bad, (e, bad)
        if expect is not None:
            names, ok = expect
            if ok:
                [e] = events
                got = {"route": e.route, "target.model": e.target_model,
                       "target.revision": e.target_revision,
                       "target.tokenizer": e.target_tokenizer, "draft.model": e.draft_model,
                       "draft.revision": e.draft_revision,
                       "draft.tokenizer": e.draft_tokenizer, "spec.method": e.method}
                assert got == names, (got, names)
            else:
                assert not events and len(rejections) == 1, rejections

    def _aggregate(self, raw: bytes) -> None:
        p = self.pipeline
        p.process(0, self.offset, raw)
        self.offset += 1
        assert self.guard.tracked <= 2 * TOTAL + 1
        if self.inputs % CHECKPOINT_EVERY == 0:
            assert p.checkpoint()
            stats = list(self.store.rollups.values())
            assert sum(b.requests for b in stats) == p.summary.events
            assert all(b.accepted_tokens <= b.drafted_tokens for b in stats)
            keys = {k for k, _ in self.store.rollups}
            assert len(keys) <= 2 * TOTAL + 1
        if self.inputs % EXPOSE_EVERY == 0:
            self._expose()
        if self.inputs % RESET_EVERY == 0:
            self._reset()

    def _expose(self) -> None:
        from prometheus_client import generate_latest
        from prometheus_client.parser import text_string_to_metric_families

        routes = {s.labels["route"]
                  for f in text_string_to_metric_families(generate_latest(self.registry).decode())
                  for s in f.samples if s.name == "specwatch_requests_total"}
        assert routes == {k.route for k, _ in self.store.rollups}, routes


# -- processes ----------------------------------------------------------------------------------

def child(libfuzzer_args: list[str]) -> None:
    import atheris

    with atheris.instrument_imports(include=["monitor", "alerts"]):
        import monitor.aggregate.guard
        import monitor.deadletter
        import monitor.exposition
        import monitor.pipeline
        import monitor.telemetry.parse
        import monitor.telemetry.serialize  # noqa: F401

    target = Target()
    atheris.Setup([sys.argv[0], *libfuzzer_args], target)
    atheris.Fuzz()


_RUNS = re.compile(r"stat::number_of_executed_units: (\d+)")
_COV = re.compile(r"#\d+\s+\w+\s+cov: (\d+)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, help="iterations (default: unbounded)")
    parser.add_argument("--seconds", type=int, help="wall-clock limit")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS,
                        help="corpus directory, seeded when empty (default: bench/out/fuzz/corpus)")
    parser.add_argument("--artifacts", type=Path,
                        help="where crashes go (default: artifacts next to the corpus)")
    parser.add_argument("--max-len", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0, help="libFuzzer seed (0: random)")
    args = parser.parse_args(argv)
    if args.runs is None and args.seconds is None:
        parser.error("give --runs or --seconds")
    try:
        from importlib.metadata import version

        engine = f"atheris {version('atheris')}"
    except Exception:  # noqa: BLE001 - any failure means the engine is missing
        print("fuzz: atheris is not installed (pip install atheris)", file=sys.stderr)
        return 2
    corpus = args.corpus.resolve()
    before = write_seeds(corpus)
    artifacts = (args.artifacts or corpus.parent / "artifacts").resolve()
    artifacts.mkdir(parents=True, exist_ok=True)
    crashes_before = {p.name for p in artifacts.glob("crash-*")}
    lib = [f"-max_len={args.max_len}", f"-seed={args.seed}", "-print_final_stats=1",
           f"-artifact_prefix={artifacts}/", "-rss_limit_mb=2048"]
    if args.runs is not None:
        lib.append(f"-runs={args.runs}")
    if args.seconds is not None:
        lib.append(f"-max_total_time={args.seconds}")
    started = time.monotonic()
    # one stream: atheris prints a crash's Python traceback on stdout, libFuzzer on stderr
    proc = subprocess.run([sys.executable, __file__, "--child", *lib, str(corpus)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace", cwd=ROOT)
    elapsed = time.monotonic() - started
    log = "\n".join(line for line in proc.stdout.splitlines()
                    if not line.startswith("INFO: Instrumenting"))
    done = _RUNS.search(log)
    runs = int(done.group(1)) if done else None
    cov = _COV.findall(log)
    crashes = sorted({p.name for p in artifacts.glob("crash-*")} - crashes_before)
    after = sum(1 for p in corpus.iterdir() if p.is_file())
    found = len(crashes) or (1 if proc.returncode != 0 else 0)
    print(f"fuzz: {engine}, {runs if runs is not None else '?'} iterations in {elapsed:.0f} s, "
          f"crashes {found}, corpus {after} inputs ({after - before:+d}), "
          f"coverage {cov[-1] if cov else '?'} edges")
    if found:
        tail = "\n".join(log.strip().splitlines()[-40:])
        print(f"fuzz: child exit {proc.returncode}; artifacts {crashes}\n{tail}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:  # libFuzzer's own flags follow, not ours
        child(sys.argv[2:])
    sys.exit(main())
