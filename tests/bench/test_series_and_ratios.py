"""bench/series_replay.py, bench/replay_checkpoints.py, bench/segment_memory.py,
bench/ratios.py and bench/detection_batch.py on small sizes: they run and print their rows."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENV = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}


def test_series_replay_prints_five_series_and_each_n_with_its_ratio(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "bench/series_replay.py", "--events", "3000", "--series", "50,300",
         "--keep", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=300, env=ENV,
    ).stdout
    rows = {int(m[1].replace(",", "")): m for m in re.finditer(
        r"^\s+([\d,]+)\s+([\d,]+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)$", out, re.M)}
    assert sorted(rows) == [5, 50, 300], out
    assert float(rows[5][5]) == 1.0
    assert all(int(r[2].replace(",", "")) > 0 and int(r[4]) > 0 for r in rows.values())
    # --keep: the inputs stay, and bench/replay_checkpoints.py takes them
    assert {f.name for f in tmp_path.iterdir()} == {"base.jsonl", "n50.jsonl", "n300.jsonl",
                                                   "config.yaml"}
    assert sum(1 for _ in (tmp_path / "n300.jsonl").open()) == 3000
    out = subprocess.run(
        [sys.executable, "bench/replay_checkpoints.py", str(tmp_path / "n300.jsonl"),
         "--config", str(tmp_path / "config.yaml"), "--size-classes", "3"],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=300, env=ENV,
    ).stdout
    commits = re.findall(r"^commit (\d+): ([\d.]+) CPU s; ([\d,]+) rollup deltas, ([\d,]+) "
                         r"slice deltas, ([\d,]+) snapshots, ([\d,]+) changes$", out, re.M)
    assert commits, out
    assert [int(c[0]) for c in commits] == list(range(1, len(commits) + 1))
    assert sum(int(c[2].replace(",", "")) for c in commits) > 0
    total = re.search(r"^replay ([\d.]+) CPU s, of which commits ([\d.]+) s \(\d+%\) in "
                      r"(\d+); resident at the end (\d+) MB, peak (\d+) MB$", out, re.M)
    assert total, out
    assert int(total[3]) == len(commits)
    assert float(total[2]) <= float(total[1]) and int(total[4]) <= int(total[5])
    pools = re.search(r"^pymalloc at the end: (\d+) MB arenas, (\d+) MB in objects, (\d+) MB "
                      r"free in used pools, (\d+) MB in empty pools$", out, re.M)
    assert pools, out
    # the three parts are the arenas (each rounded on its own)
    assert abs(sum(int(pools[i]) for i in (2, 3, 4)) - int(pools[1])) <= 2
    assert int(pools[2]) > 0
    classes = re.findall(r"^  +(\d+)-byte blocks: +([\d,]+) in use, +([\d,]+) free \((\d+) MB\)$",
                         out, re.M)
    assert len(classes) == 3 and all(int(c[0]) % 16 == 0 for c in classes), out
    assert all(int(c[1].replace(",", "")) > 0 for c in classes)
    # the most free space first
    free = [int(c[0]) * int(c[2].replace(",", "")) for c in classes]
    assert free == sorted(free, reverse=True)
    out = subprocess.run(
        [sys.executable, "bench/segment_memory.py", str(tmp_path / "n300.jsonl"),
         "--config", str(tmp_path / "config.yaml"), "--sample", "50"],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=300, env=ENV,
    ).stdout
    assert re.search(r"^300 segments, 5 routes; per segment, over 50:$", out, re.M), out
    parts = dict(re.findall(r"^  (\w[\w ]*?) +(\d+) B", out, re.M))
    assert {"labels", "acceptance", "breakeven", "throughput", "segment",
            "series ids", "total"} <= parts.keys(), out
    assert int(parts["acceptance"]) > 300 and int(parts["labels"]) > 0
    assert int(parts["total"]) > sum(int(v) for k, v in parts.items()
                                     if k in ("labels", "acceptance", "breakeven"))


def test_ratios_reads_a_routes_hours_by_the_primary_key() -> None:
    out = subprocess.run(
        [sys.executable, "bench/ratios.py", "--series", "200", "--routes", "5", "--days", "2",
         "--repeat", "1", "--process-repeat", "3"],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=300, env=ENV,
    ).stdout
    assert "200 series over 5 routes, 9,600 hour rows and 400 day rows" in out, out
    # 40 series of the route x 48 hours; the last day is 24 of them
    assert out.count("hourly, 30 days") == 0 and "hourly, 2 days: 1,920 rows" in out, out
    assert "hourly, last day: 960 rows" in out, out
    assert "SEARCH rollups USING INDEX sqlite_autoindex_rollups_1" in out, out
    api = re.search(r"hourly, 2 days, GET /api/v1/ratios \(JSON, ([\d,]+) bytes\): ([\d.]+) s",
                    out)
    # 1,920 rows of about 800 bytes each
    assert api and int(api[1].replace(",", "")) > 1_000_000, out
    assert re.search(r"as a process: [\d.]+ s \(quartiles [\d.]+-[\d.]+\), CPU [\d.]+ s "
                     r"\(quartiles [\d.]+-[\d.]+\) \(3 runs\)$", out, re.M), out


def test_detection_batch_prints_both_feeds_and_finds_the_same_state() -> None:
    out = subprocess.run(
        [sys.executable, "bench/detection_batch.py", "--events", "3000", "--rounds", "1",
         "--group", "500"],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=300, env=ENV,
    ).stdout
    assert re.search(r"^one event per call\s+[\d.]+\s+[\d.]+$", out, re.M), out
    assert re.search(r"^500 per call\s+[\d.]+\s+[\d.]+$", out, re.M), out
    assert "same detector state: yes" in out
