"""The page itself: hostile names stay text (in the source and in a real browser's DOM), and a
route without telemetry is an error, not an empty page."""

from __future__ import annotations

import html
import json
import random
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from monitor.report.charts import svg_text
from monitor.report.data import gather_report
from monitor.report.html import render_html
from monitor.store.store import Store
from tests.monitor.report import chromium, replay, report_cli, report_parser

ROUTE = '<script>alert("x")</script> & \'co\' 🚀 مرحبا \u202eevil'
TARGET, DRAFT, REVISION = "tgt<&>", 'drf"<i>', "r$1$"  # $..$ would be mathtext in a chart
T0 = datetime(2026, 11, 2, 12, tzinfo=UTC)
SINCE, UNTIL = "2026-11-02T00:00:00Z", "2026-11-03T00:00:00Z"


def _hostile_events(path: Path, n: int = 900) -> Path:
    """Fifteen minutes of one pair, one request a second, with prefix-consistent counts per
    position."""
    rng = random.Random(7)
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            steps, accepted = 10, rng.randint(20, 36)
            rest = accepted - 20
            third = min(10, rest - rest // 2)
            event = {
                "request_id": f"h-{i}", "route": ROUTE,
                "ts": (T0 + timedelta(seconds=i)).isoformat().replace("+00:00", "Z"),
                "target": {"model": TARGET, "revision": REVISION, "tokenizer": "tok"},
                "draft": {"model": DRAFT, "revision": "d1", "tokenizer": "tok"},
                "spec": {"num_speculative_tokens": 4, "drafted_tokens": 40,
                         "accepted_tokens": accepted, "verify_steps": steps,
                         "accepted_per_position": [10, 10, third, rest - third]},
                "output_tokens": accepted + steps, "e2e_ms": 900.0 + rng.random() * 200,
                "ttft_ms": 80.0 + rng.random() * 40,
            }
            fh.write(json.dumps(event, ensure_ascii=False) + "\n")
    return path


@pytest.fixture
def hostile(store: Store, migrated_url: str, tmp_path: Path) -> tuple[Store, str]:
    replay(_hostile_events(tmp_path / "hostile.jsonl"), migrated_url)
    return store, migrated_url


def test_hostile_names_stay_text(hostile: tuple[Store, str], tmp_path: Path) -> None:
    store, url = hostile
    out = tmp_path / "r.html"
    assert report_cli(["--route", ROUTE, "--since", SINCE, "--until", UNTIL, "--db", url,
                       "--out", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    shown = html.escape(ROUTE.replace("\u202e", "\\u202e"), quote=True)
    assert f"<bdi>{shown}</bdi>" in page
    assert f"<title>specwatch report: {shown}</title>" in page
    assert "\u202e" not in page  # a bidi override would flip the rest of the line
    assert page.count("<script") == 0 and "<i>" not in page
    assert html.escape(f"{DRAFT} → {TARGET}") in page
    # chart legends show the revision with its literal $ (not mathtext, not "\\$")
    svgs = re.findall(r"<svg.*?</svg>", page, re.S)
    assert len(svgs) == 5 and any("target r$1$, draft d1, k=4" in s for s in svgs)
    assert "r\\$1" not in page
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids))  # five inline SVGs, no clashing clip-path or marker ids
    # escaped once, not twice
    assert "&amp;lt;" not in page and "&amp;amp;" not in page

    # the browser agrees: the route is one text node, no element was injected
    dom = chromium(out, tmp_path / "profile", "--dump-dom").stdout
    assert "<script" not in dom and "<i>" not in dom
    assert "&lt;script&gt;alert(\"x\")&lt;/script&gt; &amp; 'co' 🚀 مرحبا \\u202eevil" in dom


def test_svg_text_neutralises_mathtext_and_controls() -> None:
    assert svg_text("a$b$") == r"a\$b\$"
    assert svg_text("x\x1b[0m\u202e") == "x\\x1b[0m\\u202e"
    assert svg_text("مرحبا 🚀") == "مرحبا 🚀"


def test_no_telemetry_is_an_error(store: Store, migrated_url: str, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.html"
    assert report_cli(["--route", ROUTE, "--since", SINCE, "--until", UNTIL,
                       "--db", migrated_url, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specwatch: no telemetry for route ")
    assert "between 2026-11-02 00:00:00 UTC and 2026-11-03 00:00:00 UTC" in err
    assert "\u202e" not in err  # the terminal gets the escaped name
    assert not out.exists()  # no empty page saved over an older report

    # the page of an empty report, for callers of the API, says the same
    report = gather_report(store, ROUTE, since=T0, until=T0 + timedelta(hours=1))
    assert report.empty
    page = render_html(report)
    assert "no telemetry for route" in page and "<svg" not in page
    assert "\u202e" not in page and "<script" not in page


def test_hour_buckets_to_stdout(hostile: tuple[Store, str],
                                capsys: pytest.CaptureFixture[str]) -> None:
    _, url = hostile
    assert report_cli(["--route", ROUTE, "--since", SINCE, "--until", UNTIL, "--db", url,
                       "--out", "-", "--granularity", "hour"]) == 0
    page = capsys.readouterr().out
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 5
    assert re.search(r"· hour buckets ·", page)


def test_defaults() -> None:
    before = datetime.now(UTC)
    args = report_parser().parse_args(["report", "--route", "chat"])
    assert before - timedelta(days=30, seconds=5) <= args.since <= datetime.now(UTC) - timedelta(
        days=30)
    assert (args.until, args.out, args.granularity) == (None, "report.html", "auto")
