"""Instructions per replayed event, this checkout against an earlier commit (callgrind).

Seconds on a shared 2-core machine move by 20% between identical runs; instruction counts
do not (valgrind counts them whatever else runs). Each tree replays the same file under
``valgrind --tool=callgrind`` twice: the whole file and its first line alone (start-up:
imports, schema, the first checkpoint); the difference over the event count is the cost of
an event. Checkpoints are moved to the end (``checkpoint_interval`` 1 h): under valgrind a
2 s wall-clock interval would checkpoint fifty times as often as a normal run, and the
slower tree would pay for more checkpoints. ``PYTHONHASHSEED`` is fixed.

    PYTHONPATH=. python bench/replay_instructions.py --base ab2eef1            # ~15 min
    PYTHONPATH=. python bench/replay_instructions.py --base ab2eef1 --events 5000 --rate 50

The traffic is ``bench/ingest.py``'s (quiet, 200 events/s) unless ``--rate`` says otherwise.
Needs ``valgrind`` (Debian package) and git.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from monitor.simulate import Simulator, scenario_config  # noqa: E402

CONFIG = "ingest:\n  checkpoint_interval: 1h\n"


def traffic(path: Path, n: int, rate: float, seed: int) -> None:
    cfg = scenario_config("quiet", duration_s=2 * n / rate, rate=rate, seed=seed)
    with path.open("w") as f:
        for i, event in enumerate(Simulator(cfg).events()):
            if i == n:
                break
            f.write(json.dumps(event) + "\n")


def instructions(tree: Path, data: Path, work: Path, tag: str, migrate: bool) -> int:
    out = work / f"{tag}.callgrind"
    db = work / f"{tag}.db"
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
           "-m", "monitor", "replay", str(data), "--config", str(work / "config.yaml"),
           "--db", f"sqlite:///{db}", "--no-progress"] + (["--migrate"] if migrate else [])
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(tree)}
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{tag}: replay under valgrind failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="commit to compare with (git rev)")
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--rate", type=float, default=200.0, help="events/s of the traffic")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind not found (Debian package valgrind)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "config.yaml").write_text(CONFIG)
        base = work / "base"
        base.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.base],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        # The old tree needs --migrate; a new database is created by today's replay anyway.
        old_cli = "--migrate" in (base / "monitor" / "cli.py").read_text()
        data, first = work / "events.jsonl", work / "first.jsonl"
        traffic(data, args.events, args.rate, args.seed)
        first.write_text(data.read_text().split("\n", 1)[0] + "\n")
        runs = {(name, kind): (tree, path, name == "base" and old_cli)
                for name, tree in (("base", base), ("this", ROOT))
                for kind, path in (("all", data), ("start", first))}
        with ThreadPoolExecutor(max_workers=2) as pool:
            counts = dict(zip(runs, pool.map(
                lambda item: instructions(item[1][0], item[1][1], work,
                                          f"{item[0][0]}-{item[0][1]}", item[1][2]),
                runs.items()), strict=True))
    per = {name: (counts[(name, "all")] - counts[(name, "start")]) / args.events
           for name in ("base", "this")}
    print(f"# {args.events:,} events at {args.rate:g}/s (seed {args.seed}); base {args.base}")
    print(f"{'tree':<6} {'start-up':>16} {'whole replay':>16} {'per event':>12}")
    for name in ("base", "this"):
        print(f"{name:<6} {counts[(name, 'start')]:>16,} {counts[(name, 'all')]:>16,} "
              f"{per[name]:>12,.0f}")
    print(f"per event: {per['this'] / per['base'] - 1:+.1%}; start-up: "
          f"{counts[('this', 'start')] / counts[('base', 'start')] - 1:+.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
