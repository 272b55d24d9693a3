"""The report's gate section: the verdict badge, every test's row, names escaped."""

from __future__ import annotations

from monitor.gate import judge_gate
from monitor.gate.html import render_gate_section
from tests.monitor.gate.test_judge import BROKEN_JSON, CODE, JSON
from tests.monitor.gate.traffic import sides


def test_the_section_shows_the_failure_and_escapes_names() -> None:
    g = sides({"<b>json</b>\u202e": (JSON, 5_000), "code": (CODE, 5_000)},
              {"<b>json</b>\u202e": (BROKEN_JSON, 5_000), "code": (CODE, 5_000)}, seed=9)
    page = render_gate_section([judge_gate(g)])
    assert page.startswith("<h2>Release gate</h2>")
    assert '<div class="change worse"><h3><span class="badge">FAIL</span>' in page
    assert "<b>json" not in page and "&lt;b&gt;json&lt;/b&gt;\\u202e" in page
    assert page.count("<tr>") == 1 + 1 + 6 + 4  # header, overall, then per route its tests
    assert "tool_calls_valid_rate" in page and "always-valid" in page
