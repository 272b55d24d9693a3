"""The daemon facade: one object that owns the consumer, the pipeline and the store.

``Application(config).run()`` is ``specwatch run``: it consumes until ``stop()`` (SIGTERM or
SIGINT in the CLI), checkpointing rollups and offsets together as it goes, and leaves the
consumer group cleanly on the way out. A ``kill -9`` at any moment loses nothing either: the
next start resumes from the last checkpoint.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry
from sqlalchemy.exc import SQLAlchemyError

from alerts.alerting import Alerting
from alerts.delivery import DeliveryWorker, default_holder
from alerts.metrics import AlertMetrics
from alerts.sinks import build_sinks
from monitor.aggregate.guard import CardinalityGuard
from monitor.api.app import create_app
from monitor.api.auth import token_from_env
from monitor.api.routes_view import routes_from_detection, store_routes_view
from monitor.api.server import ApiServer, require_token
from monitor.changes import JudgeSettings
from monitor.config import Config
from monitor.deadletter import KafkaDeadLetter
from monitor.detect.engine import Detection
from monitor.exceptions import ConfigError, LoopFailedError
from monitor.exposition import DetectionCollector, DetectionView, RollupCounters, snapshot_view
from monitor.exposition_changes import ChangeCollector
from monitor.exposition_outcome import OutcomeCollector
from monitor.exposition_policy import PolicyCollector
from monitor.gate import GateSettings
from monitor.jobs import Jobs
from monitor.kafka_producer import dead_letter_producer
from monitor.metrics import IngestMetrics
from monitor.pipeline import Pipeline
from monitor.policy.job import run_policy_job
from monitor.policy.slicer import Slicer
from monitor.sources.bootstrap import check_bootstrap
from monitor.sources.kafka import KafkaSource, source_id
from monitor.sources.topics import ensure_topics
from monitor.store.checkpoint import Checkpoint
from monitor.store.exceptions import StoreError
from monitor.store.store import Store

log = logging.getLogger(__name__)

LOOP_FAILURES_MAX = 5  # unexpected failures in a row before the process gives up
LOOP_BACKOFF_S = (1.0, 30.0)  # the wait after one, doubling
LOOP_CLEAN_S = 60.0  # a loop this long without failure is no longer "in a row"
CONTROL_EVERY_S = 5.0  # how soon a silence or a baseline request takes effect
ROUTES_EVERY_S = 5.0  # how fresh /api/v1/routes is (it evaluates every segment)


class _LoopFailures:
    """Unexpected poll-loop failures in a row (none within ``LOOP_CLEAN_S`` resets them)."""

    def __init__(self) -> None:
        self.count = 0
        self.last = float("-inf")

    def failed(self) -> float | None:
        """Count one; the wait before going on, or ``None`` when it is time to give up."""
        self.count += 1
        self.last = time.monotonic()
        if self.count > LOOP_FAILURES_MAX:
            return None
        lo, hi = LOOP_BACKOFF_S
        return min(hi, lo * 2 ** (self.count - 1))

    def ok(self) -> None:
        if self.count and time.monotonic() - self.last >= LOOP_CLEAN_S:
            self.count = 0


class Application:
    """specwatch's daemon: Kafka telemetry in; exact rollups, decisions and alerts out."""

    def __init__(
        self,
        config: Config,
        *,
        registry: CollectorRegistry | None = None,
        store: Store | None = None,
        env: dict[str, str] | None = None,
        http: tuple[str, int] | None = None,
    ) -> None:
        self.config = config
        env = dict(os.environ if env is None else env)
        self._http = http
        self._api_token = token_from_env(env) if http is not None else None
        if http is not None:
            # Before anything starts: an API on a public address without a token is refused.
            require_token(http[0], self._api_token)
        self.api: ApiServer | None = None
        # Refuses an unmigrated database before touching Kafka (NotMigratedError).
        self.store = store or Store(config.store.url)
        self.registry = registry or CollectorRegistry()
        self.metrics = IngestMetrics(self.registry)
        kafka = config.kafka
        # An unreachable broker is one line within seconds, not 30 s of client retries.
        check_bootstrap(kafka.bootstrap_servers)
        # A topic missing while kafka.create_topics is off stops us here, with one line.
        ensure_topics(kafka.bootstrap_servers, [kafka.topic, kafka.dead_letter_topic],
                      kafka.partitions, create=kafka.create_topics)
        self._producer = dead_letter_producer(kafka)
        dead_letter = KafkaDeadLetter(
            self._producer, kafka.dead_letter_topic, kafka.dead_letter_max_bytes
        )
        # Live: silence is measured against the wall clock (swept in run()).
        self.detection = (
            Detection(config.detection, clock="wall") if config.detection.enabled else None
        )
        # Sink URLs and keys only ever come from the environment.
        self.sinks = build_sinks(config.alerting, env)
        self.alert_metrics = AlertMetrics(self.registry, self.sinks)
        holder = default_holder()
        self.alerting = (
            Alerting(config.alerting, self.sinks, self.alert_metrics)
            if self.detection is not None else None
        )
        self.delivery = DeliveryWorker(
            self.store.alerting, self.sinks, config.alerting, self.alert_metrics, holder=holder
        )
        # /metrics: pair counters follow committed checkpoints; the segment gauges render the
        # view the pipeline thread publishes after each checkpoint, never live detectors.
        self.rollup_counters = RollupCounters(self.registry)
        self.outcome_metrics = OutcomeCollector(
            price_per_gpu_hour=config.cost.price_per_gpu_hour,
            max_series=config.exposition.max_series)
        self.registry.register(self.outcome_metrics)
        self.detection_view: DetectionView | None = None
        self.registry.register(DetectionCollector(lambda: self.detection_view,
                                                  config.exposition.max_series))
        # Changes are judged from the committed rollups, at most once a minute, on scrape.
        self.judge = JudgeSettings.from_config(config.detection)
        self.registry.register(ChangeCollector.for_store(self.store, self.judge))
        # Series per route and in total are capped: hostile or runaway labels cannot grow
        # the tables, the detectors or /metrics without bound.
        self.guard = CardinalityGuard(self.store, config.ingest.max_series_per_route,
                                      config.ingest.max_series, self.registry)
        self.pipeline = Pipeline(
            self.store, source_id(kafka), config.ingest, self.metrics, dead_letter,
            observer=self.detection, alerting=self.alerting, on_outbox=[self.delivery.wake],
            on_commit=[self.rollup_counters.observe, self.outcome_metrics.observe,
                       self._publish_view], holder=holder,
            guard=self.guard, gpus_per_replica=config.cost.gpus_per_replica,
            slicer=Slicer(config.policy) if config.policy.enabled else None,
        )
        self.source = KafkaSource(kafka, self.pipeline, probe=self.store.ping)
        self._stop = threading.Event()
        # Set by the scheduler's staleness job; only this thread touches detection.
        self._tick_due = threading.Event()
        self.policy_metrics = PolicyCollector.for_store(self.store)
        self.registry.register(self.policy_metrics)
        self.jobs = Jobs(self.store, config.jobs, retention=config.retention,
                         request_tick=self._tick_due.set, holder=holder,
                         policy=lambda end: run_policy_job(self.store, config, end,
                                                           self.policy_metrics.set))
        self._last_control = float("-inf")
        self._caught_up = False
        # Plain values handed to the API's threads by single assignments on this thread.
        self._partitions: list[int] = []
        self.routes: list[dict[str, Any]] | None = None  # None: nothing evaluated yet
        self._last_routes = float("-inf")

    def run(self) -> None:
        log.info(
            "specwatch consuming %s from %s into %s; alerts to %s",
            self.config.kafka.topic, self.config.kafka.bootstrap_servers, self.store.url,
            ", ".join(self.sinks) or "no sink",
        )
        self.delivery.start()
        self.jobs.start()
        try:
            if self._http is not None:
                # Live routes once the pipeline published them; the committed ones before.
                committed = store_routes_view(self.store, [self.pipeline.source])
                self.api = ApiServer(
                    create_app(self.store, registry=self.registry, token=self._api_token,
                               status=self.status, changes=self.judge,
                               price_per_gpu_hour=self.config.cost.price_per_gpu_hour,
                               gate=GateSettings.from_config(self.config.gate),
                               config=self.config,
                               routes_view=lambda: self.routes if self.routes is not None
                               else committed()),
                    *self._http,
                )
                self.api.start()  # in the try: a taken port still stops the delivery worker
                log.info("HTTP API and /metrics on %s", self.api.url)
            failures = _LoopFailures()
            while not self._stop.is_set():
                try:
                    self._step()
                except ConfigError:
                    raise  # the broker refuses this configuration: one line, exit 2
                except Exception as e:
                    self._loop_failed(e, failures)
                else:
                    failures.ok()
        finally:
            self.close()

    def _step(self) -> None:
        self.source.poll_once()
        self._partitions = self.pipeline.partitions  # rebalances happen in poll
        try:
            self._maybe_control()
        except (StoreError, SQLAlchemyError) as e:  # tried again next interval
            log.warning("operator actions not read: %s", e)
        self._maybe_tick()

    def _loop_failed(self, error: Exception, failures: _LoopFailures) -> None:
        """No error ends the loop silently: log it whole, count it, and go on from the
        stored offsets after a backoff; or, failing too often in a row, exit loudly."""
        self.metrics.loop_errors.inc()
        delay = failures.failed()
        if delay is None:
            log.critical("the poll loop failed %d times in a row; exiting for a supervisor "
                         "to restart specwatch", failures.count, exc_info=error)
            raise LoopFailedError(
                f"the poll loop failed {failures.count} times in a row (last: {error!r}); "
                f"tracebacks are in the log") from error
        log.error("the poll loop failed (%d in a row); uncommitted work dropped, going on "
                  "from the stored offsets in %.1fs", failures.count, delay, exc_info=error)
        self.source.restart_from_store()
        self._stop.wait(delay)

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        try:
            self.jobs.shutdown(wait=False)
            if self.api is not None:
                self.api.stop()
            self.source.close()
        finally:
            self.delivery.stop()
            try:
                self._producer.close(timeout=5)
            except Exception as e:  # broker away: what is unsent was never checkpointed
                log.warning("dead-letter producer closed with records unsent: %s", e)
            self.store.close()

    def _maybe_tick(self) -> None:
        """The staleness sweep the scheduler asked for, once the backlog is read."""
        if not self._tick_due.is_set():
            return
        self._caught_up = self.source.caught_up()
        if self.detection is None or not self.detection.loaded or not self._caught_up:
            return  # asked again at the next sweep
        self._tick_due.clear()
        self.detection.tick(time.time())
        self._publish_view()  # a tick that commits nothing still retires idle segments

    def status(self) -> dict[str, object]:
        """For ``/readyz`` (read from the API thread: plain values only)."""
        partitions = self._partitions  # not pipeline.partitions: its dict changes on poll
        loaded = self.detection is None or self.detection.loaded
        broker_up = self.source.broker_up()
        store_up = self.source.store_up
        paused = self.source.in_outage
        reasons = []
        if not broker_up:
            reasons.append(f"broker unreachable (no answer for "
                           f"{self.source.broker_silence_s:.0f}s or more)")
        if not store_up:
            reasons.append("store unavailable: checkpoints stopped, ingestion paused")
        elif paused:
            reasons.append("dead-letter topic unavailable: ingestion paused")
        if not partitions:
            reasons.append("no partition assigned yet")
        if not loaded:
            reasons.append("detection state not loaded yet")
        return {
            "ready": not reasons,
            "reason": "; ".join(reasons) or None,
            "partitions": partitions,
            "caught_up": self._caught_up,
            "detection_loaded": loaded,
            "broker": "up" if broker_up else "down",
            "store": "up" if store_up else "down",
            "ingest_paused": paused,
        }

    def _publish_view(self, cp: Checkpoint | None = None) -> None:
        """Pipeline thread: one assignment, which the scrape thread reads whole."""
        if self.detection is None or not self.detection.loaded:
            return
        firing = self.alerting.lifecycle.firing() if self.alerting is not None else None
        self.detection_view = snapshot_view(self.detection, firing,
                                            max_series=self.config.exposition.max_series)
        now = time.monotonic()
        if self._http is not None and now - self._last_routes >= ROUTES_EVERY_S:
            self._last_routes = now
            self.routes = routes_from_detection(self.detection, self.pipeline.source)

    def _maybe_control(self) -> None:
        """Operator actions written by the CLI: silences and accepted baselines."""
        now = time.monotonic()
        if now - self._last_control < CONTROL_EVERY_S or self.alerting is None:
            return
        self._last_control = now
        alerting = self.store.alerting
        self.alerting.silences = alerting.silences(active_at=datetime.now(UTC))
        for req in alerting.baseline_requests(pending_only=True):
            if self.pipeline.accept_baseline(req.id, req.route):
                log.info("new baseline accepted for route %s (request %d by %s: %s)",
                         req.route, req.id, req.requested_by, req.reason)
