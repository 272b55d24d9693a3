"""Stress: the broker-fault tests again and again beside a CPU burner (not run in CI).

Issue 13: the daemon died when broker connections were reset, and
``tests/monitor/test_broker_faults.py::test_connections_reset_refused_and_stalled`` failed
about one run in three on a loaded machine. This repeats, ``--runs`` times (default 20),

- ``test_specwatch_run_survives_three_outages_of_resets_and_refusals``: ``specwatch run`` as
  its own process, three outages of 25 s (every new connection reset, every open one cut);
- ``test_connections_reset_refused_and_stalled``: the in-process daemon through resets,
  refusals and stalls;

each run a fresh ``pytest`` process (its own broker and fault proxy), while a burner process
keeps ``--burners`` cores (default 1) busy. It prints one line per run (passed or failed, its
duration) and ``k of N passed`` with the durations' min, median and max; the output of a
failed run is kept in ``--logs`` (default ``stress-broker-faults/``). A full run takes about
N x 2.5 minutes.

Exit code: 0 when every run passed, 1 otherwise, 130 when interrupted.

Commands (from the repo root)::

    .venv/bin/python bench/stress_broker_faults.py                 # 20 runs, one burner
    .venv/bin/python bench/stress_broker_faults.py --runs 2 --burners 2
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = [
    "tests/monitor/test_broker_faults.py::"
    "test_specwatch_run_survives_three_outages_of_resets_and_refusals",
    "tests/monitor/test_broker_faults.py::test_connections_reset_refused_and_stalled",
]


def burn() -> None:
    """One core busy until terminated."""
    x = 0
    while True:
        x = (x * 1103515245 + 12345) % 2147483648


def run_once(index: int, logs: Path) -> tuple[bool, float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *TESTS, "-q", "-p", "no:cacheprovider", "-x"],
        cwd=ROOT, capture_output=True, text=True,
    )
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        logs.mkdir(parents=True, exist_ok=True)
        (logs / f"run-{index:02d}.log").write_text(proc.stdout + proc.stderr)
    return proc.returncode == 0, elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="repetitions (default 20)")
    parser.add_argument("--burners", type=int, default=1,
                        help="processes keeping a core busy meanwhile (default 1)")
    parser.add_argument("--logs", type=Path, default=Path("stress-broker-faults"),
                        help="where the output of failed runs goes")
    args = parser.parse_args(argv)
    burners = [multiprocessing.Process(target=burn, daemon=True) for _ in range(args.burners)]
    for b in burners:
        b.start()
    results: list[tuple[bool, float]] = []
    try:
        for i in range(1, args.runs + 1):
            ok, elapsed = run_once(i, args.logs)
            results.append((ok, elapsed))
            print(f"run {i:2d}/{args.runs}: {'passed' if ok else 'FAILED'} in {elapsed:.1f}s"
                  + ("" if ok else f" (output in {args.logs / f'run-{i:02d}.log'})"),
                  flush=True)
    except KeyboardInterrupt:
        return 130
    finally:
        for b in burners:
            b.terminate()
            b.join()
    passed = sum(ok for ok, _ in results)
    durations = [d for _, d in results]
    print(f"{passed} of {len(results)} passed beside {args.burners} CPU burner(s); "
          f"durations min {min(durations):.1f}s, median {statistics.median(durations):.1f}s, "
          f"max {max(durations):.1f}s")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
