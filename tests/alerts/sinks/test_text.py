"""The shared text helpers: escaping, truncation, Retry-After and error reasons."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

from hypothesis import given
from hypothesis import strategies as st

from alerts.sinks.text import (
    answer_code,
    reason,
    retry_after,
    slack_escape,
    truncate,
    truncate_mrkdwn,
)
from tests.alerts.receivers import mrkdwn_problems


def test_slack_escape_does_ampersand_first_and_nothing_else() -> None:
    assert slack_escape("&lt;") == "&amp;lt;"  # a literal "&lt;" stays literal
    assert slack_escape("<!channel>") == "&lt;!channel&gt;"
    assert slack_escape("a&b<c>") == "a&amp;b&lt;c&gt;"
    for s in ("🚀 fast", "مسار", "it's \"quoted\" | piped *bold* _it_ `code`"):
        assert slack_escape(s) == s


@given(st.text())
def test_escaped_text_is_valid_mrkdwn(s: str) -> None:
    assert mrkdwn_problems(slack_escape(s)) == []


@given(st.text(), st.integers(min_value=0, max_value=50))
def test_truncate_caps_length_and_marks_cuts(s: str, n: int) -> None:
    out = truncate(s, n)
    assert len(out) <= n
    if len(s) <= n:
        assert out == s
    elif n:
        assert out.endswith("…") and s.startswith(out[:-1])


@given(st.text(alphabet="ab&<>🚀", max_size=60), st.integers(min_value=1, max_value=40))
def test_truncate_mrkdwn_never_cuts_an_entity(s: str, n: int) -> None:
    out = truncate_mrkdwn(slack_escape(s), n)
    assert len(out) <= n
    assert mrkdwn_problems(out) == []


def test_truncate_mrkdwn_drops_a_half_construct() -> None:
    text = "since <!date^1793629200^{date_short_pretty} {time}|2026-11-02 14:20 UTC> ok"
    out = truncate_mrkdwn(text, 30)
    assert out == "since …" and mrkdwn_problems(out) == []


def test_retry_after_seconds_and_http_date() -> None:
    now = datetime(2026, 11, 2, 14, 20, tzinfo=UTC)
    assert retry_after({"Retry-After": "7"}) == 7.0
    assert retry_after({"retry-after": " 120 "}) == 120.0
    date = format_datetime(now + timedelta(seconds=90), usegmt=True)
    assert retry_after({"Retry-After": date}, now=now.timestamp()) == 90.0
    past = format_datetime(now - timedelta(hours=1), usegmt=True)
    assert retry_after({"Retry-After": past}, now=now.timestamp()) == 0.0
    assert retry_after({}) is None
    assert retry_after({"Retry-After": "-3"}) is None
    assert retry_after({"Retry-After": "tomorrow-ish"}) is None


def test_answer_code_caps_and_flattens() -> None:
    assert answer_code(b"x" * 500) == "x" * 99 + "…"
    assert answer_code(b"line one\nline\ttwo") == "line one line two"
    assert answer_code(b"\xff\xfe") != ""  # undecodable bytes don't raise


def test_reason_scrubs_a_secret_before_capping() -> None:
    secret = "s3cr3tT0kenV4lue42xyz"
    body = ("e" * 90 + secret).encode()  # the secret straddles the 100-character cap
    why = reason(400, body, [secret])
    assert "s3cr3t" not in why and why.startswith("HTTP 400 ")
    assert reason(0, b"") == "no answer (network error or timeout)"
