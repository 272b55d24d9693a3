"""`specwatch replay` against a bare `json.loads` loop over the same file, in one run.

Issue 18's replay target: `specwatch replay` with detection on (the command as a user runs
it, default configuration: cardinality guard, policy slices, alert lifecycle) at 0.5x or
more of a loop that only reads the file's lines and `json.loads` each, on two files:

- ``bench``: `bench/ingest.py`'s traffic (quiet, 200 requests/s, 5 routes);
- ``trace``: a 2-day, 5-route trace with per-position counts and latencies
  (`specwatch simulate --duration 2d --rate 2`, the default scenario).

Per file: the loop's CPU seconds and events/s; `specwatch replay` in a fresh process into a
fresh SQLite store: its CPU seconds (user + system, start-up included), its own events/s
(first line read to last checkpoint), peak RSS; and both ratios, by rate and by CPU. The
CPU ratio is the one to trust on a shared machine.

    PYTHONPATH=. python bench/replay_cli.py                      # both files
    PYTHONPATH=. python bench/replay_cli.py --files trace --tree ../old-checkout
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

TRACE_START = "2026-11-01T00:00:00Z"


def bench_file(path: Path, events: int, seed: int) -> None:
    # In a process of its own: a child inherits the parent's peak RSS (ru_maxrss is kept
    # across fork and exec), so this process must never hold the events.
    code = ("import sys; from pathlib import Path; from ingest import events; "
            "from monitor.simulate import write_file; "
            "write_file(events(int(sys.argv[1]), int(sys.argv[2])), Path(sys.argv[3]))")
    subprocess.run([sys.executable, "-c", code, str(events), str(seed), str(path)],
                   env=dict(os.environ, PYTHONPATH=f"{HERE.parent}:{HERE}"), check=True)


def trace_file(path: Path, tree: Path, duration: str) -> None:
    subprocess.run([sys.executable, "-m", "monitor", "simulate", "--duration", duration,
                    "--rate", "2", "--start", TRACE_START, "--out", str(path)],
                   env=dict(os.environ, PYTHONPATH=str(tree)), cwd=tree, check=True,
                   capture_output=True)


def json_loop(path: Path) -> dict[str, float]:
    """The floor: read the file's lines and ``json.loads`` each, nothing else."""
    n = 0
    t0, c0 = time.perf_counter(), time.process_time()
    with path.open("rb") as f:
        for line in f:
            json.loads(line)
            n += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"events": n, "wall": wall, "cpu": cpu, "rate": n / wall}


def replay(tree: Path, path: Path, db: Path) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.Popen([sys.executable, "-m", "monitor", "replay", str(path), "--db",
                             f"sqlite:///{db}", "--no-progress"], env=env, cwd=tree,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    out = (proc.stdout.read() if proc.stdout else b"").decode()
    err = (proc.stderr.read() if proc.stderr else b"").decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"replay of {path.name} failed:\n{out}\n{err}")
    said = re.search(r"([0-9]+) events counted.* in ([0-9.]+)s \(([0-9,]+) events/s\)", err)
    if said is None:
        raise RuntimeError(f"no rate in replay's summary:\n{err}")
    return {"events": int(said.group(1)), "rate": float(said.group(3).replace(",", "")),
            "cpu_s": usage.ru_utime + usage.ru_stime, "maxrss_mb": usage.ru_maxrss / 1024.0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", default="bench,trace", help="which files: bench, trace")
    p.add_argument("--events", type=int, default=300_000, help="events of the bench file")
    p.add_argument("--duration", default="2d", help="event time of the trace")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tree", type=Path, default=HERE.parent,
                   help="the checkout whose specwatch runs (default: this one)")
    args = p.parse_args(argv)
    print(f"tree: {args.tree}; detection on, default configuration, SQLite; "
          f"cpus={os.cpu_count()}")
    print(f"{'file':<6} {'events':>8} {'json ev/s':>10} {'json CPU s':>10} "
          f"{'replay ev/s':>11} {'replay CPU s':>12} {'peak MB':>8} {'x rate':>7} "
          f"{'x CPU':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in args.files.split(","):
            path = work / f"{name}.jsonl"
            if name == "bench":
                bench_file(path, args.events, args.seed)
            elif name == "trace":
                trace_file(path, HERE.parent, args.duration)
            else:
                raise SystemExit(f"unknown file {name!r}: bench or trace")
            floor = json_loop(path)
            got = replay(args.tree, path, work / f"{name}.db")
            print(f"{name:<6} {got['events']:>8,} {floor['rate']:>10,.0f} "
                  f"{floor['cpu']:>10.2f} {got['rate']:>11,.0f} {got['cpu_s']:>12.2f} "
                  f"{got['maxrss_mb']:>8.0f} {got['rate'] / floor['rate']:>7.2f} "
                  f"{floor['cpu'] / got['cpu_s']:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
