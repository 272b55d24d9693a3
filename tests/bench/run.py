"""Running a bench/ script as its users do: from the repo root, in a fresh process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_bench(*args: str, timeout: float = 120) -> str:
    """The standard output of ``python bench/...`` with ``args``; fails on a non-zero exit."""
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, check=True,
        timeout=timeout, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    ).stdout
