"""bench/pyspy_summary.py: a py-spy raw profile summed by frame, as run from the repo root."""

from __future__ import annotations

import doctest
import subprocess
from pathlib import Path

import pytest

from bench import pyspy_summary
from bench.pyspy_summary import summarise
from tests.bench.run import run_bench

# as py-spy --subprocesses writes them: the parent's process frame, then the child's
N10K = 'process 7:"python bench/soak.py";process 8:"python -m monitor run --config n10000-a.yaml"'
BASE = 'process 7:"python bench/soak.py";process 9:"python -m monitor run --config base-a.yaml"'
RAW = f"""\
{N10K};main (m.py:1);commit (s.py:2);merge (w.py:3) 6
{N10K};main (m.py:1);poll (k.py:9) 2
{N10K};main (m.py:1);walk (t.py:4);walk (t.py:4) 2
{BASE};main (m.py:1);poll (k.py:9) 30
process 7:"python bench/soak.py";main (soak.py:1) 4
"""


def test_shares_count_only_the_chosen_process_and_a_recursive_frame_once() -> None:
    s = summarise(RAW.splitlines(), process="n10000-")
    assert s.total == 10
    assert s.own["merge (w.py:3)"] == 6 and s.own["poll (k.py:9)"] == 2
    assert s.inclusive["main (m.py:1)"] == 10
    assert s.inclusive["walk (t.py:4)"] == 2  # twice on its stack, two samples


def test_a_frame_below_the_process_frames_does_not_choose_the_process() -> None:
    assert summarise(RAW.splitlines(), process="soak.py").total == 44
    assert summarise(RAW.splitlines(), process="m.py").total == 0


def test_within_keeps_only_stacks_through_that_frame() -> None:
    s = summarise(RAW.splitlines(), process="n10000-", within="commit")
    assert s.total == 6 and set(s.own) == {"merge (w.py:3)"}


def test_a_line_that_is_no_stack_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="line 2"):
        summarise(["a;b 1", "a;b many"])


def test_samples_outside_any_python_frame_count_under_a_name_of_their_own() -> None:
    s = summarise(["a;b 3", " 2"])
    assert s.total == 5 and s.own[pyspy_summary.NO_FRAMES] == 2 and s.own["b"] == 3


def test_doctests() -> None:
    assert doctest.testmod(pyspy_summary).failed == 0


def test_the_command_prints_percentages(tmp_path: Path) -> None:
    raw = tmp_path / "p.raw"
    raw.write_text(RAW)
    out = run_bench("bench/pyspy_summary.py", str(raw), "--process", "n10000-", "--top", "3")
    assert out.splitlines()[0] == "10 samples"
    assert " 60.0%  merge (w.py:3)" in out and "100.0%  main (m.py:1)" in out
    with pytest.raises(subprocess.CalledProcessError):
        run_bench("bench/pyspy_summary.py", str(tmp_path / "missing.raw"))
