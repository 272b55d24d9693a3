"""``bench/fuzz.py`` keeps working: a short bounded run on its seed corpus finds nothing and
grows the corpus, and a planted bug is found, saved and reported (so the harness would not
quietly pass a real crash)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HARNESS = REPO / "bench" / "fuzz.py"
SUMMARY = re.compile(r"fuzz: atheris [\d.]+, (\d+) iterations in \d+ s, crashes (\d+), "
                     r"corpus (\d+) inputs \(([+-]\d+)\), coverage (\d+|\?) edges")


def fuzz(*args: str, plant: bool = False) -> tuple[int, re.Match[str], str]:
    env = dict(os.environ, SPECWATCH_FUZZ_PLANT="1" if plant else "0")
    proc = subprocess.run([sys.executable, str(HARNESS), *args], capture_output=True,
                          text=True, timeout=300, env=env, cwd=REPO)
    m = SUMMARY.search(proc.stdout)
    assert m, proc.stdout + proc.stderr[-3000:]
    return proc.returncode, m, proc.stderr


def test_a_bounded_run_on_the_seed_corpus(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    code, m, err = fuzz("--runs", "3000", "--seed", "7", "--corpus", str(corpus))
    assert code == 0, err
    runs, crashes, size, added, coverage = m.groups()
    seeds = sorted(p.name for p in corpus.iterdir() if p.name.startswith("seed-"))
    assert len(seeds) >= 15  # written on first use
    assert int(runs) >= 3000 and int(crashes) == 0
    assert int(size) == len(list(corpus.iterdir())) and int(added) > 0
    assert coverage != "?" and int(coverage) > 100
    assert not list((tmp_path / "artifacts").iterdir())


def test_a_planted_bug_is_found_and_saved(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "planted").write_bytes(b"PLANTED")
    code, m, err = fuzz("--runs", "100", "--corpus", str(corpus), plant=True)
    assert code == 1 and m.group(2) == "1"
    [crash] = (tmp_path / "artifacts").glob("crash-*")
    assert crash.read_bytes() == b"PLANTED"
    assert "RuntimeError: planted bug" in err  # the traceback is shown
