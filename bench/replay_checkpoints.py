"""Where a `specwatch replay`'s CPU and memory go: each checkpoint's commit, and the heap left.

Runs ``specwatch replay FILE`` in this process (a fresh SQLite store) and prints, per
checkpoint, the CPU seconds of the store's transaction and what it wrote (rollup deltas,
slice deltas, snapshots, change records); then the whole replay's CPU, the share of it in
commits, and resident memory at the end (after the collector and ``malloc_trim``: what the
process keeps) beside its peak; then how pymalloc's arenas are used at the end (live
objects, free blocks, empty pools), which tells the live heap from allocator free space.
Made for issue 18's 10,000-series input (``bench/series_replay.py --keep DIR`` leaves the
files), to tell a per-series cost paid once per checkpoint from one paid per event.

    PYTHONPATH=. python bench/series_replay.py --keep /tmp/sr    # writes the inputs
    PYTHONPATH=. python bench/replay_checkpoints.py /tmp/sr/n10000.jsonl \
        --config /tmp/sr/config.yaml
    PYTHONPATH=. python bench/replay_checkpoints.py /tmp/sr/base.jsonl \
        --config /tmp/sr/config.yaml
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from checkpoint_memory import replay_argv


def resident_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


# sys._debugmallocstats()'s totals (CPython's small-object allocator, pymalloc).
_PYMALLOC = {
    "arenas": re.compile(r"^\d+ arenas \* \d+ bytes/arena\s+=\s+([\d,]+)$", re.M),
    "in objects": re.compile(r"^# bytes in allocated blocks\s+=\s+([\d,]+)$", re.M),
    "free in used pools": re.compile(r"^# bytes in available blocks\s+=\s+([\d,]+)$", re.M),
    "in empty pools": re.compile(r"^\d+ unused pools \* \d+ bytes\s+=\s+([\d,]+)$", re.M),
}


_SIZE_CLASS = re.compile(r"^\s*\d+\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$", re.M)


def _mallocstats() -> str:
    """What ``sys._debugmallocstats()`` prints (to the C-level stderr)."""
    with tempfile.TemporaryFile() as err:
        # it writes to the C-level stderr: swap the descriptor for a moment
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(err.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        return err.read().decode(errors="replace")


def size_classes() -> list[tuple[int, int, int]]:
    """pymalloc's size classes as (block size, blocks in use, free blocks in used pools)."""
    return [(int(m[1]), int(m[3]), int(m[4])) for m in _SIZE_CLASS.finditer(_mallocstats())]


def pymalloc_mb() -> dict[str, float] | None:
    """Where pymalloc's arenas go: live objects, free blocks in pools that hold objects, and
    empty pools (an arena is returned only once all its pools are empty). None where
    ``sys._debugmallocstats`` says nothing (another allocator)."""
    text = _mallocstats()
    found = {name: rx.search(text) for name, rx in _PYMALLOC.items()}
    if not all(found.values()):
        return None
    return {name: int(m[1].replace(",", "")) / (1 << 20) for name, m in found.items() if m}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("events", type=Path, help="a JSON-lines file of telemetry events")
    p.add_argument("--config", type=Path, default=None)
    p.add_argument("--size-classes", type=int, default=0, metavar="N",
                   help="then the N block sizes with the most free space in used pools")
    args = p.parse_args(argv)

    from monitor import heap
    from monitor.cli import main as cli
    from monitor.store.store import Store

    commits: list[float] = []
    commit = Store._commit

    def timed_commit(self: Store, cp: Any) -> Any:
        started = time.process_time()
        out = commit(self, cp)
        spent = time.process_time() - started
        commits.append(spent)
        print(f"commit {len(commits)}: {spent:.2f} CPU s; {len(cp.rollups):,} rollup deltas, "
              f"{len(cp.slices):,} slice deltas, {len(cp.state):,} snapshots, "
              f"{len(cp.changes):,} changes", flush=True)
        return out

    Store._commit = timed_commit  # type: ignore[method-assign]
    started = time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        code = cli(replay_argv(args.events, args.config, Path(tmp)))
    total = time.process_time() - started
    gc.collect()
    heap.release()
    spent = sum(commits)
    print(f"replay {total:.2f} CPU s, of which commits {spent:.2f} s ({spent / total:.0%}) "
          f"in {len(commits)}; resident at the end {resident_mb():.0f} MB, peak "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    pools = pymalloc_mb()
    if pools is not None:
        print("pymalloc at the end: " + ", ".join(f"{v:.0f} MB {k}" for k, v in pools.items()))
    if args.size_classes:
        worst = sorted(size_classes(), key=lambda c: c[0] * c[2], reverse=True)
        for size, used, free in worst[:args.size_classes]:
            print(f"  {size:4d}-byte blocks: {used:>10,} in use, {free:>10,} free "
                  f"({size * free / (1 << 20):.0f} MB)")
    return code


if __name__ == "__main__":
    sys.exit(main())
