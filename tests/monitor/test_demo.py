"""README command 1: `specwatch demo` in a terminal shows per-route acceptance from live Kafka
traffic, a scripted draft-drift incident, the alert it raises and where it goes, the per-segment
on/off decisions, and stops quietly on Ctrl+C."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from monitor.aggregate.bucket import BucketStats
from monitor.aggregate.series import SeriesKey
from monitor.alert_record import AlertRecord
from monitor.config import Config
from monitor.demo import alert_lines, decision_lines, render
from monitor.store.store import Store

ROUTES = ("chat", "code-assistant", "creative-writing", "summarize", "translation")
OLD_REVISION = "2026-10-28"  # creative-writing's target before the incident
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# route, pair, target revision, k, requests in 5 min, acceptance in 5 min
ROW = re.compile(r"^(\S+) +\S+ +\S+ +\d +\d+ +(0\.\d{3}) ", re.M)
ALERT = re.compile(r"FIRING warning revision_mismatch creative-writing -> log only: set "
                   r"SPECWATCH_SLACK_WEBHOOK_URL to send it\n +target revision (\S+) differs "
                   r"from the revision 2026-10-28 draft llama-3.2-1b-instruct was validated")
BREAKEVEN = re.compile(r"FIRING warning below_breakeven creative-writing -> .*\n +acceptance "
                       r"0\.3\d is below the break-even 0\.40")
DECISION = re.compile(r"^  (\S+) +target (\S+) +k=\d  (ON|OFF|WAIT) ", re.M)


def _take_terminal() -> None:
    # In the child, after setsid: the pty becomes its controlling terminal, as in a shell.
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """A command on a pseudo-terminal of its own; what it prints, read as it comes."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.leader, follower = pty.openpty()
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 160, 0, 0))
        self.proc = subprocess.Popen(
            argv, stdin=follower, stdout=follower, stderr=follower, env=env, close_fds=True,
            start_new_session=True, preexec_fn=_take_terminal,
        )
        os.close(follower)
        self._chunks: list[bytes] = []
        self._closed = False
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.leader, 65536)
            except OSError:  # EIO once the child and its terminal are gone
                chunk = b""
            with self._changed:
                if not chunk:
                    self._closed = True
                else:
                    self._chunks.append(chunk)
                self._changed.notify_all()
            if not chunk:
                return

    def text(self) -> str:
        """Everything printed so far, without escape sequences and carriage returns."""
        with self._changed:
            raw = b"".join(self._chunks)
        return ANSI.sub("", raw.decode(errors="replace")).replace("\r", "")

    def wait_for(self, done: Callable[[str], bool], deadline: float, what: str) -> str:
        with self._changed:
            while True:
                text = self.text()
                if done(text):
                    return text
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed:
                    raise AssertionError(f"no {what} (exit code {self.proc.poll()}); "
                                         f"last output:\n{text[-4000:]}")
                self._changed.wait(remaining)

    @property
    def closed(self) -> bool:
        return self._closed

    def ctrl_c(self) -> None:
        # The terminal turns ^C into SIGINT for its foreground process group.
        os.write(self.leader, b"\x03")

    def close(self) -> None:
        if self.proc.poll() is None:  # a failed test: still stop the broker it started
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=10)
        os.close(self.leader)


def _acceptance(text: str) -> dict[str, float]:
    """The latest acceptance shown per route (the first row of a route that has two)."""
    shown: dict[str, float] = {}
    for screen in text.split("specwatch demo ")[1:]:
        latest: dict[str, float] = {}
        for m in ROW.finditer(screen):
            latest.setdefault(m.group(1), float(m.group(2)))
        shown.update(latest)
    return shown


def _decisions(text: str) -> dict[tuple[str, str], str]:
    """(route, target revision) -> ON/OFF/WAIT on the last complete screen."""
    screens = text.split("specwatch demo ")
    last = screens[-2] if len(screens) > 2 else screens[-1]
    return {(m.group(1), m.group(2)): m.group(3) for m in DECISION.finditer(last)}


def _incident_seen(text: str) -> bool:
    decisions = _decisions(text)
    drifted = [rev for (route, rev), d in decisions.items()
               if route == "creative-writing" and rev != OLD_REVISION and d == "OFF"]
    return bool(ALERT.search(text) and BREAKEVEN.search(text) and drifted
                and decisions.get(("code-assistant", "2026-10-14")) == "ON")


def _demo(tmp_path: Path, incident_after: str) -> Terminal:
    # No sink variable from the machine running the tests: the demo says "log only".
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECWATCH_")}
    return Terminal([sys.executable, "-m", "monitor", "demo", "--dir", str(tmp_path),
                     "--refresh", "1s", "--incident-after", incident_after], env)


@pytest.mark.broker
def test_demo_in_a_terminal_shows_the_incident_alert_and_decisions_then_stops_quietly(
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    term = _demo(tmp_path, "5s")
    try:
        term.wait_for(lambda t: set(_acceptance(t)) == set(ROUTES), started + 60,
                      "row for every route within 60 s")
        text = term.wait_for(_incident_seen, started + 120,
                             "revision_mismatch alert, below_breakeven and OFF decision")
        term.ctrl_c()
        rc = term.proc.wait(timeout=90)
        term.wait_for(lambda _: term.closed, time.monotonic() + 10, "end of output")
        text = term.text()
    finally:
        term.close()
    assert rc == 0, text[-4000:]
    # No traceback, and no client shouting at a broker that went away before it
    assert "Traceback" not in text and "Error" not in text and "ERROR" not in text, text[-4000:]
    assert "stopped; the tables stay in" in text
    # Routes keep their different acceptance levels: a fleet average would hide this.
    acceptance = _acceptance(text)
    assert acceptance["code-assistant"] > 0.7 > acceptance["creative-writing"]
    assert acceptance["translation"] < 0.45
    # The drifted pair is its own row and its own segment; the old one stays on.
    decisions = _decisions(text)
    assert decisions[("creative-writing", OLD_REVISION)] in ("ON", "WAIT")
    assert decisions[("translation", "2026-08-20")] == "OFF"  # 0.35 < 0.40 from the start
    # What was shown live is in the store for later queries.
    with Store(f"sqlite:///{tmp_path / 'specwatch.db'}") as store:
        assert {k.route for k in store.stats(granularity="minute")} == set(ROUTES)
        revisions = {k.target_revision for k in store.stats(granularity="minute")
                     if k.route == "creative-writing"}
        assert OLD_REVISION in revisions and len(revisions) == 2
        assert {"revision_mismatch", "below_breakeven"} <= {
            a.rule for a in store.alerts(route="creative-writing")}


@pytest.mark.broker
def test_a_closed_terminal_stops_the_demo_and_its_broker(tmp_path: Path) -> None:
    # The broker runs in its own process group (Ctrl+C must not stop it before the daemon):
    # the hangup of a closed terminal reaches only the demo, which must stop it.
    term = _demo(tmp_path, "10m")
    try:
        text = term.wait_for(lambda t: "route " in t, time.monotonic() + 60, "table")
        shown = re.search(r"broker 127\.0\.0\.1:(\d+)", text)
        assert shown is not None
        port = int(shown.group(1))
        term.proc.send_signal(signal.SIGHUP)
        assert term.proc.wait(timeout=60) == 0
    finally:
        term.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_render_marks_missing_values_and_orders_routes() -> None:
    key_b = SeriesKey("b-route", "t", "r", "tok", "", "", "", "ngram", 4)
    key_a = SeriesKey("a-route", "t", "r", "tok", "d", "dr", "tok", "", 3)
    out = render({}, {key_b: BucketStats(), key_a: BucketStats()}, datetime(2026, 1, 1, tzinfo=UTC))
    rows = out.splitlines()[3:]
    assert rows[0].startswith("a-route") and rows[1].startswith("b-route")
    assert " t/d " in rows[0] and " t/ngram " in rows[1] and " - " in rows[1]


def test_alerts_show_where_they_go() -> None:
    at = datetime(2026, 11, 2, 14, 0, tzinfo=UTC)
    page = AlertRecord("below_breakeven", "firing", at, "warning", {"route": "chat"}, "chat: low")
    alerting = Config.model_validate({"alerting": {
        "routing": {"pagerduty": {"severities": ["critical"]}}}}).alerting
    lines = alert_lines([page], alerting, ["log", "pagerduty", "slack"], ["ALERT FIRING x"])
    # pagerduty takes only critical alerts
    assert lines[1:3] == ["  14:00:00 FIRING warning below_breakeven chat -> log, slack",
                          "           low"]
    assert lines[-1] == "  ALERT FIRING x"
    only_log = alert_lines([page], alerting, ["log"], [])
    assert only_log[1].endswith("chat -> log only: set SPECWATCH_SLACK_WEBHOOK_URL to send it")
    assert only_log[3] == ("  (other sinks: SPECWATCH_PAGERDUTY_ROUTING_KEY, "
                           "SPECWATCH_ALERTMANAGER_URL, SPECWATCH_WEBHOOK_URL)")
    assert alert_lines([], alerting, ["log"], [])[1] == "  none yet"


def test_decisions_show_their_evidence() -> None:
    labels = {"route": "chat", "target_revision": "r2", "num_speculative_tokens": "4"}
    off = {"labels": labels, "recommendation": "off", "recommended_num_speculative_tokens": 2,
           "evidence": {"rate": 0.31, "low": 0.3, "high": 0.32, "cutoff": 0.4,
                        "requests": 1234, "sufficient": True}}
    wait = {"labels": {**labels, "target_revision": "r3"}, "recommendation": "insufficient_data",
            "evidence": {"rate": 0.5, "requests": 3, "sufficient": False}}
    lines = decision_lines([off, wait])
    assert lines[1] == ("  chat             target r2         k=4  OFF   acceptance 0.310 "
                        "(95% 0.300-0.320, 1,234 requests) below break-even 0.40; best k=2")
    assert lines[2].endswith("WAIT  3 requests so far: not enough to decide")
