"""Where a sampled process spent its time: a py-spy raw profile, summed by frame.

``py-spy record -f raw`` writes one line per distinct stack, ``frame;frame;...;frame COUNT``
(outermost first; with ``--subprocesses`` the leading frames name the process and the
parents it runs under). This prints,
for the stacks kept, each frame's share of the samples: *self* (the frame was running) and
*inclusive* (the frame was anywhere on the stack, counted once per sample), the tables
behind the profile figures in ``docs/benchmarks.md``.

    py-spy record -f raw -r 50 --subprocesses -o soak.raw -- \\
        .venv/bin/python bench/soak.py --skip-soak --series 10000
    python bench/pyspy_summary.py soak.raw --process n10000-      # the 10,000-series daemon
    python bench/pyspy_summary.py soak.raw --process n10000- --within write_state
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Summary:
    """Samples of the kept stacks, and per frame the samples it ran in (self) or was on."""

    total: int = 0
    own: Counter[str] = field(default_factory=Counter)
    inclusive: Counter[str] = field(default_factory=Counter)

    def add(self, frames: list[str], count: int) -> None:
        self.total += count
        self.own[frames[-1]] += count
        for frame in set(frames):  # a recursive frame counts once per sample
            self.inclusive[frame] += count


NO_FRAMES = "(no Python frame)"


def _names_process(frame: str) -> bool:
    return frame.startswith("process ")


def summarise(lines: Iterable[str], process: str | None = None,
              within: str | None = None) -> Summary:
    """Sum py-spy raw lines, keeping stacks whose process (a leading ``process ...`` frame)
    contains ``process`` and any of whose frames contains ``within`` (either ``None``: all).

    >>> lines = ["process 1:a;main;load 3", "process 1:a;main;work;load 1", "process 2:b;main 5"]
    >>> s = summarise(lines, process="1:a")
    >>> s.total, s.own["load"], s.inclusive["main"], s.inclusive["work"]
    (4, 4, 4, 1)
    """
    out = Summary()
    for number, line in enumerate(lines, 1):
        line = line.rstrip("\n")
        if not line.strip():
            continue
        stack, sep, count = line.rpartition(" ")
        if not sep or not count.isdigit():
            raise ValueError(f"line {number}: not 'frame;...;frame COUNT': {line[:80]!r}")
        # py-spy writes " N" for samples it caught outside any Python frame (a C call it
        # could not attribute): time all the same, so it counts under a name of its own
        frames = stack.split(";") if stack else [NO_FRAMES]
        if process is not None and not any(
            process in f for f in itertools.takewhile(_names_process, frames)
        ):
            continue
        if within is not None and not any(within in f for f in frames):
            continue
        out.add(frames, int(count))
    return out


def table(summary: Summary, top: int, strip: str = "") -> str:
    """The two tables, largest first, as text."""
    if not summary.total:
        return "no samples kept"
    rows = [f"{summary.total:,} samples"]
    for title, counts in (("self", summary.own), ("inclusive", summary.inclusive)):
        rows.append(f"--- {title}")
        for frame, n in counts.most_common(top):
            rows.append(f"{100 * n / summary.total:5.1f}%  {frame.replace(strip, '')}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("raw", type=Path, help="a file written by py-spy record -f raw")
    p.add_argument("--process", help="keep stacks whose first frame contains this")
    p.add_argument("--within", help="keep stacks with a frame containing this")
    p.add_argument("--top", type=int, default=30, help="rows per table (default 30)")
    args = p.parse_args(argv)
    with args.raw.open(encoding="utf-8", errors="replace") as f:
        summary = summarise(f, args.process, args.within)
    print(table(summary, args.top, strip=str(Path.cwd()) + "/"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
