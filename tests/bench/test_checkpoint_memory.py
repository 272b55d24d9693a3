"""bench/checkpoint_memory.py on a short simulated file: a line per checkpoint, then the peak."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_prints_each_checkpoint_and_the_highest_peak(tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    events = tmp_path / "events.jsonl"
    subprocess.run([sys.executable, "-m", "monitor", "simulate", "--duration", "20m",
                    "--rate", "5", "--out", str(events)], cwd=REPO, env=env, check=True,
                   capture_output=True, timeout=120)
    out = subprocess.run([sys.executable, "bench/checkpoint_memory.py", str(events), "--top", "3"],
                         cwd=REPO, env=env, capture_output=True, text=True, check=True,
                         timeout=300).stdout
    lines = re.findall(r"^checkpoint: starts at (\d+) MB, peak (\d+) MB, ends at (\d+) MB$",
                       out, re.M)
    assert lines  # the replay's last checkpoint at least
    assert all(int(start) <= int(peak) and int(end) <= int(peak) for start, peak, end in lines)
    assert re.search(r"^  snapshots of [\d,]+ keys: \+\d+ MB$", out, re.M)
    highest = re.search(r"highest checkpoint peak (\d+) MB$", out, re.M)
    assert highest and int(highest.group(1)) == max(int(p) for _, p, _ in lines)
    top = re.findall(r"^  +([\d.]+) MB +[\d,]+ blocks  (.+):(\d+)$", out, re.M)
    assert len(top) == 3, out
    assert [float(t[0]) for t in top] == sorted((float(t[0]) for t in top), reverse=True)
