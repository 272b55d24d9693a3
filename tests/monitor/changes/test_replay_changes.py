"""End to end: simulated traffic with three changes of setup (one worse, one better, one
unchanged) is replayed into a store; ``specwatch changes`` (JSON and table) and the report's
Changes section give each its verdict, with intervals, on SQLite and PostgreSQL.

Each side has two hours of its own series (the judge's window is 6 h: the sides hold what
there is), several thousand requests per route, far above the 200 a verdict needs.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

from monitor.cli import main

START = "2026-11-02T00:00:00Z"
INCIDENTS = [
    # a target fine-tune the draft did not follow: acceptance -20%
    "revision_change:route=chat,at=2h,factor=0.8",
    # a new draft revision that is better: acceptance +15% (base 0.80 leaves the headroom)
    "draft_change:route=code-assistant,at=2h,factor=1.15",
    # a target fine-tune that keeps acceptance
    "revision_change:route=creative-writing,at=2h,factor=1.0",
]
# route -> (change kind, overall verdict, acceptance verdict, what changed)
EXPECTED = {
    "chat": ("draft_drift", "worse", "worse", "target_revision"),
    "code-assistant": ("new_draft", "better", "better", "draft_revision"),
    "creative-writing": ("draft_drift", "same", "same", "target_revision"),
}
AT = "2026-11-02T02:00:00"


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("changes") / "t.jsonl"
    args = ["simulate", "--scenario", "quiet", "--duration", "4h", "--rate", "6", "--seed", "11",
            "--start", START, "--out", str(path)]
    for incident in INCIDENTS:
        args += ["--incident", incident]
    assert main(args) == 0
    return path


def _changes(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> str:
    capsys.readouterr()
    assert main(["changes", "--db", url, *args]) == 0
    return capsys.readouterr().out


def test_three_changes_get_their_verdicts_with_intervals(
        traffic: Path, db_url: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(traffic), "--db", db_url, "--migrate", "--no-progress"]) == 0
    doc = json.loads(_changes(capsys, db_url, "--format", "json"))

    # exactly the three changes, nothing else (the two other routes kept their setup)
    assert sorted((c["route"], c["kind"]) for c in doc) == sorted(
        (route, kind) for route, (kind, *_) in EXPECTED.items())
    by_route = {c["route"]: c for c in doc}
    for route, (_kind, verdict, acc_verdict, changed) in EXPECTED.items():
        c = by_route[route]
        assert c["at"].startswith(AT), (route, c["at"])
        assert list(c["changed"]) == [changed], (route, c["changed"])
        assert c["changed"][changed][0] != c["changed"][changed][1]
        assert c["verdict"] == verdict, (route, c["verdict"], c["reason"])
        acc = c["metrics"]["acceptance"]
        assert acc["verdict"] == acc_verdict, (route, acc)
        low, high = acc["interval"]
        assert low is not None and high is not None and low <= acc["change"] <= high, acc
        # far above the 200 requests a side needs
        assert acc["requests_before"] > 2000 and acc["requests_after"] > 2000, acc

    chat = by_route["chat"]["metrics"]["acceptance"]
    assert chat["interval"][1] < 0 and chat["change"] < -0.1  # simulated: x 0.8
    assert chat["live"] == "worse"
    assert by_route["chat"]["previous"]["target_revision"] != \
        by_route["chat"]["current"]["target_revision"]
    better = by_route["code-assistant"]["metrics"]["acceptance"]
    assert better["interval"][0] > 0 and better["change"] > 0.1  # simulated: x 1.15
    same = by_route["creative-writing"]["metrics"]["acceptance"]
    assert same["interval"][0] < 0 < same["interval"][1]  # simulated: x 1.0
    assert abs(same["change"]) < 0.05

    # the table: each change on its header line with its verdict, acceptance first
    table = _changes(capsys, db_url)
    headers = [ln for ln in table.splitlines() if not ln.startswith(" ")]
    assert len(headers) == 3, table
    for route, (kind, verdict, *_) in EXPECTED.items():
        [line] = [h for h in headers if f"  {route} " in h]
        assert f"  {kind}  " in line and line.endswith(verdict.upper()), line
        block = table[table.index(line):].splitlines()
        acc = block[1]
        assert acc.startswith("    acceptance ") and f" {EXPECTED[route][2]} " in acc, acc
        assert "[" in acc and "%]" in acc  # the interval
    only = _changes(capsys, db_url, "--route", "code-assistant")
    assert only.splitlines()[0].endswith("BETTER") and "  chat " not in only

    # the report's Changes section, route by route
    for route, (kind, verdict, *_) in EXPECTED.items():
        page = tmp_path / f"{route}.html"
        assert main(["report", "--db", db_url, "--route", route, "--since", START,
                     "--until", "2026-11-02T04:00:00Z", "--out", str(page)]) == 0
        text = html.unescape(page.read_text())
        section = text[text.index("<h2>Changes</h2>"):]
        section = section[:section.index("<h2>", 5)] if "<h2>" in section[5:] else section
        assert section.count('<div class="change ') == 1, route
        assert f'<div class="change {verdict}">' in section, route
        assert f">{verdict.upper()}</span>" in section and kind in section
        assert "<td>acceptance</td>" in section
        assert f'<td class="{EXPECTED[route][2]}">{EXPECTED[route][2]}</td>' in section
        assert "%]</td>" in section  # intervals
