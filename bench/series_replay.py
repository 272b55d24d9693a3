"""Cost per series: `specwatch replay` of the same events on 5 series and spread over N.

The quick, broker-free twin of ``bench/soak.py --skip-soak`` (which runs the daemon through
Kafka): one file of ``--events`` simulated events as they come (the 5 default routes), and
the same events relabelled over N series (``SeriesSpreader``, as the soak's series phase
does), each replayed by ``specwatch replay`` in a fresh process into a fresh SQLite store,
with detection on and the cardinality caps raised to admit every series. Reported per run:
events/s (replay's own figure: first line read to last checkpoint), CPU seconds of the
process, peak resident memory (``ru_maxrss``) and the ratio of the N-series rate to the
5-series rate of the same run.

    PYTHONPATH=. python bench/series_replay.py                       # 200,000 events, N = 10,000
    PYTHONPATH=. python bench/series_replay.py --series 1000,10000 --events 500000
    PYTHONPATH=. python bench/series_replay.py --tree ../old-checkout  # the same on another tree
    PYTHONPATH=. python bench/series_replay.py --keep /tmp/sr  # keep the files and config

``--keep DIR`` leaves the inputs (``base.jsonl``, ``n<N>.jsonl``, ``config.yaml``) in DIR for
``bench/replay_checkpoints.py`` and ``bench/checkpoint_memory.py``.
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

from soak_traffic import SeriesSpreader, recent_events  # noqa: E402

CONFIG = """\
ingest:
  allowed_lateness: 1h
  dedup_horizon: 1h
  max_series_per_route: {per_route}
  max_series: {total}
detection:
  stale_after: 1d
  idle_pair_resolve: 1d
"""


def write_events(path: Path, events: list[dict], n_series: int | None) -> None:
    spread = SeriesSpreader(n_series, 100) if n_series else None
    with path.open("w") as f:
        for e in events:
            e = json.loads(json.dumps(e))  # a copy: the spreader relabels in place
            f.write(json.dumps(spread(e) if spread else e) + "\n")


def run(tree: Path, path: Path, config: Path, db: Path) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "monitor", "replay", str(path), "--config",
                             str(config), "--db", f"sqlite:///{db}", "--no-progress"],
                            env=env, cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    out = proc.stdout.read().decode() if proc.stdout else ""
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"replay of {path.name} failed:\n{out}\n{err}")
    # replay's own figure: from the first line read to the last checkpoint (no start-up)
    said = re.search(r"in ([0-9.]+)s \(([0-9,]+) events/s\)", out + err)
    if said is None:
        raise RuntimeError(f"no rate in replay's summary:\n{out}\n{err}")
    return {"wall_s": wall, "rate": float(said.group(2).replace(",", "")),
            "cpu_s": usage.ru_utime + usage.ru_stime, "maxrss_mb": usage.ru_maxrss / 1024.0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--series", default="10000", help="comma-separated N (default 10000)")
    p.add_argument("--tree", type=Path, default=HERE.parent,
                   help="the checkout whose specwatch runs (default: this one)")
    p.add_argument("--seed", type=int, default=6)
    p.add_argument("--keep", type=Path, default=None, metavar="DIR",
                   help="write the event files and config here and keep them (the stores "
                   "are still temporary)")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.series.split(",")]

    events = []
    for e in recent_events(args.events, args.seed):
        events.append(e)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        files = args.keep or work
        files.mkdir(parents=True, exist_ok=True)
        config = files / "config.yaml"
        config.write_text(CONFIG.format(per_route=max(256, 100),
                                        total=max(20_000, max(sizes) + 1_000)))
        print(f"tree: {args.tree}; {args.events:,} events; detection on; SQLite")
        print(f"{'series':>8} {'events/s':>9} {'CPU s':>7} {'peak RSS MB':>12} {'x 5 series':>11}")
        base_path = files / "base.jsonl"
        write_events(base_path, events, None)
        base = run(args.tree, base_path, config, work / "base.db")
        rate = base["rate"]
        print(f"{5:>8} {rate:>9,.0f} {base['cpu_s']:>7.1f} {base['maxrss_mb']:>12.0f} "
              f"{1.0:>11.2f}")
        for n in sizes:
            path = files / f"n{n}.jsonl"
            write_events(path, events, n)
            got = run(args.tree, path, config, work / f"n{n}.db")
            r = got["rate"]
            print(f"{n:>8,} {r:>9,.0f} {got['cpu_s']:>7.1f} {got['maxrss_mb']:>12.0f} "
                  f"{r / rate:>11.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
