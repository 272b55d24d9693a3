"""The log sink: one line per item, loud only while something that matters fires."""

from __future__ import annotations

import logging

import pytest

from alerts.sinks.log import LogSink
from tests.alerts.sinks import item, notification


def test_one_line_per_item_with_levels(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    a = item(severity="critical")
    n = notification(a, item("acceptance_rise", severity="info"),
                     item("telemetry_stale", status="resolved"),
                     item("throughput_drop", severity="error", repeat=True))
    LogSink().emit(n)
    lines = [(r.levelno, r.name, r.getMessage()) for r in caplog.records]
    assert lines == [
        (logging.WARNING, "specwatch.alerts",
         f"ALERT FIRING acceptance_drop code critical: code: acceptance 0.61 -> 0.49 "
         f"(episode {a.episode})"),
        (logging.INFO, "specwatch.alerts", lines[1][2]),
        (logging.INFO, "specwatch.alerts", lines[2][2]),
        (logging.WARNING, "specwatch.alerts", lines[3][2]),
    ]
    assert lines[1][2].startswith("ALERT FIRING acceptance_rise code info: ")
    assert lines[2][2].startswith("ALERT RESOLVED telemetry_stale code warning: ")
    assert lines[3][2].startswith("ALERT REMINDER throughput_drop code error: ")


def test_given_logger_and_no_forged_lines(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.sinks.log")
    caplog.set_level(logging.INFO, logger="test.sinks.log")
    LogSink(log).emit(notification(item(route="a\nALERT FAKE", summary="x\r\ny")))
    [rec] = caplog.records
    assert rec.name == "test.sinks.log" and "\n" not in rec.getMessage()
    assert "a ALERT FAKE" in rec.getMessage() and ": x y (episode" in rec.getMessage()
