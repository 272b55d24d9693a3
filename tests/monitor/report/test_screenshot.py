"""The report as a person sees it: rendered by a real headless Chromium, checked as pixels and
as the browser's DOM."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tests.monitor.report import (
    START,
    chromium,
    colour_count,
    png_pixels,
    png_size,
    replay,
    report_cli,
    simulate,
)

WIDTH, HEIGHT = 1280, 2400
PAIR_DRAFT, PAIR_TARGET = "llama-3.1-70b-instruct-eagle3", "llama-3.1-70b-instruct"
# matplotlib's first two series colours (old and new revision) and the "on" badge
BLUE, ORANGE, GREEN = (0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E), (0x2C, 0xA0, 0x2C)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("report-page")
    url = f"sqlite:///{tmp / 'specwatch.db'}"
    replay(simulate(tmp / "t.jsonl", rate=1.5), url)  # a quarter of test_data's traffic
    out = tmp / "report.html"
    assert report_cli(["--route", "chat", "--since", START, "--until", "2026-11-02T06:00:00Z",
                       "--db", url, "--out", str(out)]) == 0
    return out


def _pixels_near(pixels: np.ndarray, colour: tuple[int, int, int], tol: int = 6) -> int:
    diff = np.abs(pixels.astype(np.int16) - np.array(colour, dtype=np.int16)).max(axis=2)
    return int((diff <= tol).sum())


def test_screenshot_shows_the_report(page: Path, tmp_path: Path) -> None:
    png = tmp_path / "report.png"
    chromium(page, tmp_path / "profile", f"--window-size={WIDTH},{HEIGHT}",
             f"--screenshot={png}")
    data = png.read_bytes()
    assert png_size(data) == (WIDTH, HEIGHT)
    pixels = png_pixels(data)
    # A blank page is one colour; text, tables and four charts make thousands.
    assert colour_count(pixels) > 500
    # The charts were painted: both revisions' lines, and the "ON" badge of the header.
    for name, colour, least in (("old revision", BLUE, 500), ("new revision", ORANGE, 500),
                                ("ON badge", GREEN, 300)):
        assert _pixels_near(pixels, colour) >= least, name
    # The charts sit below the header: the top 150 rows hold no series colour.
    assert _pixels_near(pixels[:150], BLUE) == 0


def test_dom_holds_the_content(page: Path, tmp_path: Path) -> None:
    dom = chromium(page, tmp_path / "profile", "--dump-dom").stdout
    assert re.search(r'<h1>specwatch report for route <span class="route"><bdi>chat</bdi>', dom)
    assert f"{PAIR_DRAFT} → {PAIR_TARGET}" in dom
    # acceptance, per position, TTFT, throughput of the pair; task outcome where reported
    # and the policy section's one chart (the replay records slice rollups)
    assert 'class="chart-policy"' in dom
    assert dom.count("<svg") == 5 + ('class="chart-outcome"' in dom)
    assert "Task outcome and cost" in dom and "cost per success" in dom
    for caption in ("Acceptance over time", "Acceptance by draft position",
                    "Time to first token", "Decode throughput"):
        assert caption in dom
    # chart text stays text: the legend names the revisions and the break-even line
    assert "target 2026-11-02, draft 2026-10-30, k=4" in dom and "break-even 0.40" in dom
    assert "Keep speculation on" in dom and "recommended num_speculative_tokens" in dom
    assert "speculation on   chat  llama-3.1-70b-instruct-eagle3" in dom  # the text form
    assert "target revision 2026-10-28 → 2026-11-02" in dom
    assert "revision_mismatch" in dom
    # self-contained: nothing to fetch, nothing to run
    assert "<script" not in dom
    assert not re.search(r'(?:src|href)\s*=\s*"(?:https?:)?//', dom)
    assert "@import" not in dom and "url(http" not in dom
