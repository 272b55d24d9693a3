"""What a segment holds after a `specwatch replay`: deep sizes of its parts, per segment.

Runs ``specwatch replay FILE`` in this process (a fresh SQLite store), then measures a sample
of the detection engine's segments part by part (labels, setup, each detector, the live
comparison) with ``sys.getsizeof`` over everything each part reaches. What several segments
share is counted once, for the first part that reaches it: the interned strings and the
placeholders of warming detectors. Made for issue 18's series inputs
(``bench/series_replay.py --keep DIR``), to tell which part of a series' live heap to cut.

    PYTHONPATH=. python bench/series_replay.py --series 100000 --keep /tmp/sr100k
    PYTHONPATH=. python bench/segment_memory.py /tmp/sr100k/n100000.jsonl \\
        --config /tmp/sr100k/config.yaml
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

from checkpoint_memory import replay_argv

PARTS = ("labels", "setup", "described", "acceptance", "breakeven", "positions",
         "throughput", "versus", "firing")
_ATOMS = (str, bytes, int, float, bool, type(None))


def deep_size(obj: Any, seen: set[int]) -> int:
    """Bytes of ``obj`` and of everything it reaches that is not in ``seen`` (then added)."""
    total = 0
    stack = [obj]
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, type):
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
        elif not isinstance(o, _ATOMS):
            stack.extend(r for r in gc.get_referents(o) if not isinstance(r, type))
    return total


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("events", type=Path, help="a JSON-lines file of telemetry events")
    p.add_argument("--config", type=Path, default=None)
    p.add_argument("--sample", type=int, default=2000, help="segments measured (default 2000)")
    args = p.parse_args(argv)

    from monitor import pipeline
    from monitor.cli import main as cli

    made: list[Any] = []
    init = pipeline.Pipeline.__init__

    def keep(self: Any, *a: Any, **k: Any) -> None:
        init(self, *a, **k)
        made.append(self)

    pipeline.Pipeline.__init__ = keep  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as tmp:
        code = cli(replay_argv(args.events, args.config, Path(tmp)))
    (pipe,) = made
    state = pipe.observer._state
    segments = list(state.segments.values())
    if not segments:
        print("no segments")
        return code
    sample = random.Random(1).sample(segments, min(args.sample, len(segments)))
    n = len(segments)
    print(f"{n:,} segments, {len(state.routes):,} routes; per segment, over {len(sample):,}:")
    seen: set[int] = set()
    total = 0
    for part in PARTS:
        size = sum(deep_size(getattr(seg, part), seen) for seg in sample) / len(sample)
        total += size
        print(f"  {part:<12} {size:7.0f} B")
    shell = sys.getsizeof(sample[0]) + sys.getsizeof(state.segments) / n
    print(f"  {'segment':<12} {shell:7.0f} B  (the object, and its entry in the engine's dict)")
    routes = sum(deep_size(r, set(seen)) for r in state.routes.values()) / n
    ids = deep_size(pipe.store._series_ids, set(seen)) / n
    print(f"  {'routes':<12} {routes:7.0f} B  (their state, shared by their segments)")
    print(f"  {'series ids':<12} {ids:7.0f} B  (the store's cache)")
    print(f"  total        {total + shell + routes + ids:7.0f} B")
    return code


if __name__ == "__main__":
    sys.exit(main())
