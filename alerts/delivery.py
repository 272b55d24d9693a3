"""Where an alert leaves: the outbox worker that delivers notifications to the sinks.

Every notification was written to the ``outbox`` table in the checkpoint that decided it;
this worker only reads that table, so a crash or a restart loses nothing and resumes the
queue where it stopped (at-least-once; sinks dedup by episode key and fingerprint).

Each sink has its own thread and its own queue, delivered strictly in order (a resolve never
overtakes its trigger), paced to the sink's ``min_interval``. One daemon at a time holds a
sink's lease in the database, so several daemons on one store still deliver each row once
in the normal case and in order always. The holder renews the lease right before every
request (after pacing), however long a pass takes, and stops the pass when it lost it; the
lease must outlast one request (``delivery.timeout``). When the holder dies, another daemon
takes the queue over once the lease ran out: within ``delivery.lease`` plus one
``poll_interval``. The row whose request was on the wire then (the head of the queue, at
most one per sink) may be delivered twice: delivery is at-least-once, and sinks dedup
(PagerDuty by ``dedup_key``, webhooks by ``X-Specwatch-Key``). Answers are judged by the
sink:

- ``ok``: the row is delivered (``progress`` records each accepted request of a row, so a
  retry never re-sends what was accepted);
- ``retry``: again after ``Retry-After`` when the receiver gave one, else exponential backoff
  with jitter, until ``delivery.give_up_after``;
- ``permanent``: the row failed for good (counted, logged, the queue moves on); when the
  sink is *broken* (revoked webhook, bad key) the row stays queued instead, the sink is
  flagged in metrics and logs, and the queue is retried every ``BROKEN_RECHECK_S``.

Alertmanager additionally gets the periodic re-post its API asks for: every firing episode
(and every episode resolved in the last five minutes) each ``resend_interval``.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from alerts.http import HttpAnswer, HttpClient
from alerts.metrics import AlertMetrics
from alerts.notification import Notification
from alerts.sinks.base import Episode, HttpRequest, LocalSink, Outcome, Sink
from monitor.config import AlertingConfig
from monitor.store.alerting import AlertingStore, OutboxRow

__all__ = ["DeliveryWorker", "default_holder"]

log = logging.getLogger(__name__)

BROKEN_RECHECK_S = 600.0
MAX_RETRY_AFTER_S = 3600.0
HEAD_BATCH = 50
GAUGES_EVERY_S = 5.0
DUE_SLACK_S = 0.001  # stored times keep microseconds; a float clock may land just short


def default_holder() -> str:
    """This process, as lease holders and ``applied_by`` columns name it."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


class DeliveryWorker:
    """Delivers the outbox; :meth:`start` runs one thread per sink, :meth:`pump` one pass."""

    def __init__(
        self,
        store: AlertingStore,
        sinks: Mapping[str, Sink | LocalSink],
        config: AlertingConfig,
        metrics: AlertMetrics,
        *,
        holder: str | None = None,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        pace: Callable[[float], object] | None = None,
    ) -> None:
        self.store = store
        self.sinks = dict(sinks)
        self.config = config
        self.metrics = metrics
        self.holder = holder or default_holder()
        self.clock = clock
        self._rng = rng or random.Random()
        self._stop = threading.Event()
        # How a pacing gap is waited out (tests pass a recorder instead of waiting).
        self._pace = pace or self._stop.wait
        self._wake = {name: threading.Event() for name in self.sinks}
        self._threads: list[threading.Thread] = []
        self._next_send: dict[str, float] = {}
        self._broken: dict[str, float] = {}  # sink -> when to look again
        self._last_resync: dict[str, float] = {}
        self._last_gauges = float("-inf")
        self._gauges_lock = threading.Lock()
        self._http: dict[str, HttpClient] = {}
        for name in self.sinks:
            metrics.add_sink(name)
        d = config.delivery
        if d.lease <= d.timeout:
            log.warning("delivery.lease (%gs) is not longer than delivery.timeout (%gs): a "
                        "request may outlast the lease, and another daemon deliver the same "
                        "row meanwhile", d.lease, d.timeout)

    # -- threads -------------------------------------------------------------------------------

    def start(self) -> None:
        for name in self.sinks:
            t = threading.Thread(target=self._loop, args=(name,), name=f"deliver-{name}",
                                 daemon=True)
            t.start()
            self._threads.append(t)

    def wake(self) -> None:
        """New rows were committed: look now instead of at the next poll."""
        for event in self._wake.values():
            event.set()

    def stop(self, timeout: float = 15.0) -> None:
        self._stop.set()
        self.wake()
        for t in self._threads:
            t.join(timeout)
        for name in self.sinks:
            try:
                self.store.release_lease(name, self.holder)
            except Exception:  # the lease expires on its own
                log.debug("could not release the %s lease", name, exc_info=True)
        for client in self._http.values():
            client.close()

    def _loop(self, name: str) -> None:
        poll = self.config.delivery.poll_interval
        while not self._stop.is_set():
            try:
                wait = self.pump(name)
            except Exception:
                # A database hiccup must not kill delivery for good: log, back off, go on.
                log.exception("delivery to %s failed; retrying in %.0fs", name, 5 * poll)
                wait = 5 * poll
            self._wake[name].wait(poll if wait is None else min(max(wait, 0.0), poll))
            self._wake[name].clear()

    def drain(self, timeout: float) -> int:
        """Deliver until every queue is empty (or waits on a broken sink), or ``timeout``
        seconds passed; returns the rows still pending. For ``replay --deliver``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            waits = []
            for name in self.sinks:
                w = self.pump(name)
                if w is not None and name not in self._broken:
                    waits.append(w)
            if not waits:
                break
            time.sleep(min(max(min(waits), 0.0), max(0.0, deadline - time.monotonic()), 1.0))
        stats = self.store.pending_stats()
        return sum(n for sink, (n, _) in stats.items() if sink in self.sinks)

    # -- one pass ------------------------------------------------------------------------------

    def pump(self, name: str) -> float | None:
        """Deliver what is due for ``name``; returns seconds until it has more to do (``None``:
        nothing pending)."""
        sink = self.sinks[name]
        now = self.clock()
        self._refresh_gauges(now)
        if not self._hold(name):
            return self.config.delivery.lease / 2
        if name == "alertmanager":
            self._maybe_resync(sink, now)  # type: ignore[arg-type]
        recheck = self._broken.get(name)
        if recheck is not None and now < recheck:
            return recheck - now
        for row in self.store.head(name, HEAD_BATCH):
            due = row.next_attempt_at.timestamp()
            now = self.clock()
            if due - now > DUE_SLACK_S:
                return due - now
            if not self._deliver(name, sink, row):
                nxt = self.store.head(name, 1)
                return max(0.0, nxt[0].next_attempt_at.timestamp() - self.clock()) if nxt else 0
            if self._stop.is_set():
                return 0.0
        return 0.0 if self.store.head(name, 1) else None

    def _hold(self, name: str) -> bool:
        """Take or renew ``name``'s lease for ``delivery.lease`` from now."""
        return self.store.acquire_lease(name, self.holder, _utc(self.clock()),
                                        self.config.delivery.lease)

    def _deliver(self, name: str, sink: Sink | LocalSink, row: OutboxRow) -> bool:
        """One row; ``False`` when the queue must wait (retry, broken sink, lost lease)."""
        n = Notification.from_json(row.payload)
        if not hasattr(sink, "requests"):
            sink.emit(n)  # type: ignore[union-attr]
            self._done(name, row, row.progress)
            return True
        requests = sink.requests(n)  # type: ignore[union-attr]
        progress = row.progress
        while progress < len(requests):
            sent = self._send(name, sink, requests[progress])  # type: ignore[arg-type]
            if sent is None:
                # Another daemon has the queue now (this pass outlasted the lease): it
                # resumes after what this pass got accepted.
                if progress > row.progress:
                    self.store.keep_progress(row.id, progress)
                log.warning("lost the %s delivery lease mid-pass; %s is left to its holder",
                            name, row.key)
                return False
            answer, outcome = sent
            if outcome.kind == "ok":
                progress += 1
                continue
            return self._failed(name, row, progress, requests[progress], answer, outcome)
        self._done(name, row, progress)
        return True

    def _send(self, name: str, sink: Sink, req: HttpRequest
              ) -> tuple[HttpAnswer, Outcome] | None:
        """Pace, renew the lease, send; ``None`` (nothing sent) when the lease was lost."""
        wait = self._next_send.get(name, float("-inf")) - self.clock()
        if wait > 0:
            self._pace(wait)  # pacing: Slack asks for one message per second
        if not self._hold(name):
            return None
        client = self._http.get(name)
        if client is None:
            client = self._http[name] = HttpClient(self.config.delivery.timeout)
        started = time.perf_counter()
        answer = client.send(req)
        self.metrics.request_duration.labels(sink=name).observe(time.perf_counter() - started)
        self._next_send[name] = self.clock() + sink.min_interval
        if answer.status == 0:
            outcome = sink.classify(0, {}, answer.error.encode())
        else:
            outcome = sink.classify(answer.status, answer.headers, answer.body)
        return answer, outcome

    def _done(self, name: str, row: OutboxRow, progress: int) -> None:
        self.store.mark_delivered(row.id, progress, _utc(self.clock()))
        self.metrics.notifications.labels(sink=name, outcome="delivered").inc()
        if self._broken.pop(name, None) is not None:
            log.warning("sink %s delivers again", name)
        self.metrics.broken.labels(sink=name).set(0)

    def _failed(self, name: str, row: OutboxRow, progress: int, req: HttpRequest,
                answer: HttpAnswer, outcome: Outcome) -> bool:
        now = self.clock()
        attempts = row.attempts + 1
        what = f"{req.describe}: {outcome.reason or answer.error or answer.status}"
        if outcome.kind == "permanent" and outcome.broken:
            # The sink, not the message, is at fault: keep the row for when it is fixed.
            if name not in self._broken:
                log.error("sink %s is broken (%s); %s queued notifications wait for a fix",
                          name, what, len(self.store.head(name, HEAD_BATCH)))
            self._broken[name] = now + BROKEN_RECHECK_S
            self.metrics.broken.labels(sink=name).set(1)
            self.metrics.notifications.labels(sink=name, outcome="retried").inc()
            self.store.mark_retry(row.id, attempts=attempts, progress=progress,
                                  next_at=_utc(now + BROKEN_RECHECK_S), error=what)
            return False
        if outcome.kind == "permanent":
            log.error("notification %s to %s refused for good: %s", row.key, name, what)
            self.metrics.notifications.labels(sink=name, outcome="failed").inc()
            self.store.mark_failed(row.id, attempts=attempts, progress=progress, error=what)
            return True
        if now - row.created_at.timestamp() >= self.config.delivery.give_up_after:
            log.error("notification %s to %s given up after %d attempts: %s",
                      row.key, name, attempts, what)
            self.metrics.notifications.labels(sink=name, outcome="given_up").inc()
            self.store.mark_failed(row.id, attempts=attempts, progress=progress, error=what)
            return True
        delay = self._backoff(attempts, outcome.retry_after)
        log.warning("notification %s to %s: %s; attempt %d, next in %.1fs",
                    row.key, name, what, attempts, delay)
        self.metrics.notifications.labels(sink=name, outcome="retried").inc()
        self.store.mark_retry(row.id, attempts=attempts, progress=progress,
                              next_at=_utc(now + delay), error=what)
        return False

    def _backoff(self, attempts: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), MAX_RETRY_AFTER_S)
        d = self.config.delivery
        # "Equal jitter": never less than half the step, so retries stay spread but bounded.
        step = min(d.backoff_max, d.backoff_initial * 2 ** min(attempts - 1, 30))
        return step * (0.5 + 0.5 * self._rng.random())

    # -- Alertmanager re-post ---------------------------------------------------------------

    def _maybe_resync(self, sink: Any, now: float) -> None:
        am = self.config.alertmanager
        if now - self._last_resync.get("alertmanager", float("-inf")) < am.resend_interval:
            return
        self._last_resync["alertmanager"] = now
        since = _utc(now - am.resolved_resend_for)
        rows = self.store.episodes(states=("firing", "resolving"), resolved_since=since)
        episodes = [
            _episode(r) for r in rows
            if r["notified"] and r["silenced_by"] is None
            and self.config.filter_for("alertmanager", r["route"]).admits(r["rule"],
                                                                          r["severity"])
        ]
        for req in sink.resync(episodes, _utc(now)):
            sent = self._send("alertmanager", sink, req)
            if sent is None:
                return  # another daemon delivers (and re-posts) now
            answer, outcome = sent
            if outcome.kind != "ok":
                log.warning("alertmanager re-post %s: %s", req.describe,
                            outcome.reason or answer.error)

    def _refresh_gauges(self, now: float) -> None:
        with self._gauges_lock:
            if now - self._last_gauges < GAUGES_EVERY_S:
                return
            self._last_gauges = now
        stats = self.store.pending_stats()
        for name in self.sinks:
            n, oldest = stats.get(name, (0, None))
            self.metrics.pending.labels(sink=name).set(n)
            age = 0.0 if oldest is None else max(0.0, now - oldest.timestamp())
            self.metrics.oldest_pending.labels(sink=name).set(age)


def _episode(r: Mapping[str, Any]) -> Episode:
    resolved = r["resolved_at"] if r["state"] == "resolved" else None
    return Episode(r["episode"], r["fingerprint"], r["rule"], r["severity"], dict(r["labels"]),
                   r["summary"], dict(r["details"]), r["started_at"], resolved)
