"""Traced memory of each checkpoint of a `specwatch replay`: where its peak comes from.

Runs ``specwatch replay FILE`` in this process under ``tracemalloc`` (several times slower
than without) and prints, per checkpoint: the traced memory when it starts, what building
the detector snapshots adds, the peak inside the store's transaction, and what is left when
it ends. Made for issue 18's 10,000-series input (``bench/series_replay.py``'s file and
config), to tell the checkpoint's transient peak from what stays live.

    PYTHONPATH=. python bench/checkpoint_memory.py /tmp/sr/n10000.jsonl --config /tmp/sr/config.yaml
    cd ../base && PYTHONPATH=. python ../specwatch/bench/checkpoint_memory.py ...  # another tree
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

MB = 1 << 20


def replay_argv(events: Path, config: Path | None, tmp: Path) -> list[str]:
    """``specwatch replay``'s arguments for ``events`` into a fresh SQLite store in ``tmp``."""
    argv = ["replay", str(events), "--db", f"sqlite:///{tmp}/replay.db", "--no-progress"]
    return argv + ["--config", str(config)] if config is not None else argv


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("events", type=Path, help="a JSON-lines file of telemetry events")
    p.add_argument("--config", type=Path, default=None)
    p.add_argument("--top", type=int, default=0, metavar="N",
                   help="then the N source lines holding the most traced memory at the end "
                   "(what stays live, after a collection)")
    args = p.parse_args(argv)

    tracemalloc.start()
    from monitor import pipeline
    from monitor.cli import main as cli
    from monitor.detect.engine import Detection
    from monitor.store.store import Store

    peaks: list[float] = []
    # the store's transaction resets tracemalloc's peak: its own peak is kept here
    inner = {"peak": 0.0}

    def traced() -> float:
        return tracemalloc.get_traced_memory()[0] / MB

    snapshot = Detection.snapshot

    def timed_snapshot(self: Detection) -> Any:
        before = traced()
        out = snapshot(self)
        print(f"  snapshots of {len(out):,} keys: +{traced() - before:.0f} MB", flush=True)
        return out

    commit = Store._commit

    def timed_commit(self: Store, cp: Any) -> None:
        tracemalloc.reset_peak()
        before = traced()
        commit(self, cp)
        peak = tracemalloc.get_traced_memory()[1] / MB
        inner["peak"] = max(inner["peak"], peak)
        print(f"  the store's transaction: +{peak - before:.0f} MB at its peak", flush=True)

    checkpoint = pipeline.Pipeline._checkpoint

    def timed_checkpoint(self: pipeline.Pipeline) -> bool:
        tracemalloc.reset_peak()
        inner["peak"] = 0.0
        start = traced()
        done = checkpoint(self)
        peak = max(start, inner["peak"], tracemalloc.get_traced_memory()[1] / MB)
        peaks.append(peak)
        print(f"checkpoint: starts at {start:.0f} MB, peak {peak:.0f} MB, ends at "
              f"{traced():.0f} MB", flush=True)
        return done

    Detection.snapshot = timed_snapshot  # type: ignore[method-assign]
    Store._commit = timed_commit  # type: ignore[method-assign]
    pipeline.Pipeline._checkpoint = timed_checkpoint  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as tmp:
        code = cli(replay_argv(args.events, args.config, Path(tmp)))
    print(f"traced at the end {traced():.0f} MB; highest checkpoint peak "
          f"{max(peaks, default=0.0):.0f} MB")
    if args.top:
        gc.collect()
        for stat in tracemalloc.take_snapshot().statistics("lineno")[:args.top]:
            frame = stat.traceback[0]
            print(f"  {stat.size / MB:7.1f} MB {stat.count:>9,} blocks  "
                  f"{frame.filename}:{frame.lineno}")
    return code


if __name__ == "__main__":
    sys.exit(main())
