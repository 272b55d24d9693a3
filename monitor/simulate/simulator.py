"""The simulator: chunks of event time -> per-route requests -> telemetry v1 dicts."""

from __future__ import annotations

import hashlib
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from monitor.simulate import v11
from monitor.simulate.config import SimulationConfig
from monitor.simulate.durations import format_ts
from monitor.simulate.effects import Conditions, RouteEffects
from monitor.simulate.experiment import ARMS
from monitor.simulate.model import STATUSES, Requests, sample_requests
from monitor.simulate.noise import schedule
from monitor.simulate.policy_model import sample_policy_requests
from monitor.simulate.profiles import RouteProfile
from monitor.simulate.traffic import Load
from monitor.simulate.v11 import Draws

_EVENTS_PER_CHUNK = 20_000  # big enough for numpy to pay off, small enough to start quickly


def _rng(seed: int, *labels: str) -> np.random.Generator:
    # Streams keyed by name: a route's draws do not depend on which other routes exist.
    keys = tuple(zlib.crc32(label.encode()) for label in labels)
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=keys)))


def _clone(event: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of an event (its values are dicts, lists and scalars)."""
    out = dict(event)
    for key, value in event.items():
        if isinstance(value, dict):
            out[key] = _clone(value)
        elif isinstance(value, list):
            out[key] = list(value)
    return out


class Simulator:
    """Deterministic, realistic telemetry v1 traffic for a :class:`SimulationConfig`.

    ``events()`` yields dicts in emission order: event-time order, except for late events and
    duplicates when the config asks for them. Each call starts over and yields the same events.

    >>> config = SimulationConfig(seed=7, duration_s=60, rate=20)
    >>> events = list(Simulator(config).events())
    >>> len(events), events == list(Simulator(config).events())
    (669, True)
    >>> e = events[0]
    >>> e["ts"], e["route"], e["draft"]["model"]
    ('2026-11-02T00:00:00.079Z', 'code-assistant', 'qwen2.5-coder-0.5b-instruct')
    >>> spec = e["spec"]
    >>> spec["num_speculative_tokens"], spec["drafted_tokens"], spec["accepted_tokens"]
    (5, 500, 337)
    >>> spec["accepted_per_position"], e["output_tokens"] == spec["verify_steps"] + 337
    ([86, 72, 65, 60, 54], True)
    """

    def __init__(self, config: SimulationConfig) -> None:
        self.config = config

    # -- public ------------------------------------------------------------------------------

    def events(self) -> Iterator[dict[str, Any]]:
        """Telemetry v1 dicts from ``config.start`` over ``config.duration_s`` (forever if None)."""
        cfg = self.config
        chunk_s = min(3600.0, max(60.0, _EVENTS_PER_CHUNK / cfg.rate))
        for _, event in self._stream(cfg.start_ts, cfg.duration_s, chunk_s, speed=1.0):
            yield event

    def realtime(
        self, speed: float = 1.0, stop: threading.Event | None = None
    ) -> Iterator[dict[str, Any]]:
        """Live traffic: the simulation starts now and runs ``speed`` times faster than the clock.

        Events are yielded when due, so ``config.rate * speed`` per wall second on average, with
        ``ts`` the wall-clock time the request finished (late events keep their earlier ts).
        Incident offsets are simulated time: ``at=2h`` at speed 60 comes after 2 minutes.
        Runs until ``stop`` is set (``config.duration_s`` and ``config.start`` are ignored).
        """
        if not speed > 0:
            raise ValueError("speed must be > 0")
        stop = stop or threading.Event()
        wall0, mono0 = time.time(), time.monotonic()
        # Small chunks: the first events are due at once, and a chunk is generated in a few ms.
        chunk_s = min(600.0, max(1.0, 2000.0 / self.config.rate))
        for emit, event in self._stream(wall0, None, chunk_s, speed=speed):
            delay = mono0 + (emit - wall0) / speed - time.monotonic()
            if stop.wait(delay) if delay > 0 else stop.is_set():
                return
            yield event

    # -- internals ---------------------------------------------------------------------------

    def _stream(
        self, start: float, duration_s: float | None, chunk_s: float, speed: float
    ) -> Iterator[tuple[float, dict[str, Any]]]:
        """(emission time in simulated seconds, event) in emission order.

        Emitted ``ts`` = start + (event time - start) / speed, so ``speed`` compresses the
        timeline for the live mode and is 1 otherwise.
        """
        cfg = self.config
        seed = cfg.seed
        prefix = hashlib.blake2s(f"{seed}:{start!r}".encode(), digest_size=4).hexdigest()
        shares = np.array([r.share for r in cfg.routes], dtype=np.float64)
        load = Load(
            cfg.rate, shares, cfg.diurnal, cfg.bursts_per_hour, start, _rng(seed, "bursts")
        )
        arrivals_rng, noise_rng = _rng(seed, "arrivals"), _rng(seed, "noise")
        routes, pod = [], 0
        for r in cfg.routes:
            effects = RouteEffects(r, cfg.incidents, start)
            routes.append(_RouteState(r, effects, seed, pod, cfg, salt=prefix))
            pod += r.replicas  # each route has its own pods: pod-0.. for the first, and so on
        end = np.inf if duration_s is None else start + duration_s
        seq = 0
        pending_emit = np.empty(0)
        pending_key = np.empty(0)
        pending: list[dict[str, Any]] = []
        t0 = start
        while t0 < end:
            t1 = min(t0 + chunk_s, end)
            ts, ridx, ratio = load.arrivals(t0, t1, arrivals_rng)
            out_ts = start + (ts - start) / speed
            kept = np.ones(len(ts), dtype=bool)
            events: list[dict[str, Any]] = [{}] * len(ts)
            twin_ts: list[np.ndarray] = []
            twins: list[dict[str, Any]] = []
            for i, state in enumerate(routes):
                where = np.flatnonzero(ridx == i)
                keep, built = state.build(ts[where] - start, ratio[where], out_ts[where], cfg)
                kept[where] = keep
                for pos, event in zip(where[keep].tolist(), built, strict=True):
                    events[pos] = event
                if state.twins:
                    origin, delay, made = state.twins
                    twin_ts.append(ts[where[keep][origin]] + delay)
                    twins += made
            ts = ts[kept]
            events = [e for e, k in zip(events, kept.tolist(), strict=True) if k]
            if twins:
                ts, events = _merge_twins(ts, events, np.concatenate(twin_ts), twins, start,
                                          end, speed)
            for n, event in enumerate(events, start=seq):
                event["request_id"] = f"sim-{prefix}-{n:08d}"

            plan = schedule(ts, seq, cfg.duplicates, cfg.late, cfg.late_max, noise_rng)
            seq += len(events)
            emit = np.concatenate([pending_emit, plan.emit, plan.dup_emit])
            key = np.concatenate([pending_key, plan.key, plan.dup_key])
            objs = pending + events + [_clone(events[i]) for i in plan.dup_of.tolist()]
            order = np.lexsort((key, emit))
            # Nothing generated later can go out before t1: later events have ts >= t1.
            ready = order[emit[order] < t1] if t1 < end else order
            for i in ready.tolist():
                yield float(emit[i]), objs[i]
            rest = order[len(ready):]
            pending_emit, pending_key = emit[rest], key[rest]
            pending = [objs[i] for i in rest.tolist()]
            t0 = t1


def _merge_twins(
    ts: np.ndarray,
    events: list[dict[str, Any]],
    twin_ts: np.ndarray,
    twins: list[dict[str, Any]],
    start: float,
    end: float,
    speed: float,
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """The chunk's events with the shadow twins that finish before the end, in ts order."""
    inside = twin_ts < end  # a shadow still running when the simulation ends never reports
    twin_ts = twin_ts[inside]
    twins = [t for t, i in zip(twins, inside.tolist(), strict=True) if i]
    for twin, text in zip(twins, format_ts(start + (twin_ts - start) / speed), strict=True):
        twin["ts"] = text
    merged_ts = np.concatenate([ts, twin_ts])
    merged = events + twins
    order = np.argsort(merged_ts, kind="stable")
    return merged_ts[order], [merged[i] for i in order.tolist()]


class _RouteState:
    """One route's generators, incident effects and event templates within a stream."""

    def __init__(
        self,
        route: RouteProfile,
        effects: RouteEffects,
        seed: int,
        first_pod: int,
        cfg: SimulationConfig,
        salt: str,
    ) -> None:
        self.route = route
        self.pods = [f"pod-{first_pod + i}" for i in range(route.replicas)]
        self.effects = effects
        self.fixed = _rng(seed, "route", route.name, "fixed")
        self.chain = _rng(seed, "route", route.name, "chain")
        self.params = dict(route.spec_params)
        # v1.1 and experiment draws come from streams of their own, created only when asked
        # for, so a config without them gives the events it always gave.
        self.v11_draws = _rng(seed, "route", route.name, "v11") if cfg.v11 else None
        self.shadow = cfg.shadow
        self.experiment = cfg.experiment
        self.arms = _rng(seed, "route", route.name, "arm") if self.experiment else None
        self.change = self.experiment.change(route.name) if self.experiment else None
        self.salt = f"{seed}:{salt}"
        self.served = 0  # requests drawn so far: a request's index, for its prompt
        self.twins: tuple[np.ndarray, np.ndarray, list[dict[str, Any]]] | None = None

    def build(
        self, offsets: np.ndarray, load: np.ndarray, out_ts: np.ndarray, cfg: SimulationConfig
    ) -> tuple[np.ndarray, list[dict[str, Any]]]:
        """Requests finishing at ``offsets``: which are kept (not silenced), and their events.

        Shadow twins of the kept events, if any, are left in ``twins``: positions of their
        originals among the kept events, their delay after them in seconds, the events.
        """
        n = len(offsets)
        cond = self.effects.conditions(offsets, self.fixed.random(n))
        candidate = None
        if self.arms is not None and self.experiment is not None and self.change is not None:
            # drawn before the requests: the candidate's acceptance shapes their decode
            candidate = self.arms.random(n) < self.experiment.candidate_share
            cond.rate[candidate] *= self.change.acceptance_factor
        sample = sample_requests if self.route.policy is None else sample_policy_requests
        req = sample(
            self.route, load, cond, cfg.error_rate, cfg.timeout_ms, self.fixed, self.chain
        )
        keep = cond.keep
        events = self._events(req, cond.variant, cond.evicted, out_ts, keep, cfg.engine, candidate)
        self.twins = None
        if self.v11_draws is not None:
            self._add_v11(events, req, cond, candidate, keep, Draws.take(self.v11_draws, n))
        self.served += n
        return keep, events

    def _add_v11(
        self,
        events: list[dict[str, Any]],
        req: Requests,
        cond: Conditions,
        candidate: np.ndarray | None,
        keep: np.ndarray,
        draws: Draws,
    ) -> None:
        route = self.route
        n = len(keep)
        cand_outcomes = self.change.outcomes if self.change else {}
        outcome = v11.outcomes(route, req, draws, candidate, cand_outcomes)
        gpu = v11.gpu_seconds(route, req.e2e_ms, req.batch_size)
        itl = v11.itl_ms(req, draws)
        targets = [self.effects.variant(v)[0] for v in cond.variant.tolist()]
        keys = range(self.served, self.served + n)
        prompts, outputs, truths = v11.hashes(route, req, cond, draws, targets, keys, self.salt)
        tags = dict(route.tags)
        own = req.tags  # per-request tags on policy routes
        idx = np.flatnonzero(keep).tolist()
        for event, i in zip(events, idx, strict=True):
            if own is not None:
                if own[i]:
                    event["tags"] = dict(own[i])
            elif tags:
                event["tags"] = dict(tags)
            if outcome[i] is not None:
                event["outcome"] = outcome[i]
            if gpu[i] is not None:
                event["gpu_seconds"] = gpu[i]
            if itl[i] is not None:
                event["itl_ms"] = itl[i]
            if prompts[i] is not None:
                event["prompt_hash"] = prompts[i]
                event["output_hash"] = outputs[i]
        if not self.shadow or route.temperature != 0:
            return
        shadowed = draws.shadowed(self.shadow) & (req.status == STATUSES.index("ok"))
        origin = np.flatnonzero(shadowed[keep])
        if not len(origin):
            return
        at = np.flatnonzero(keep)[origin]
        # The shadow upstream got the request when the original did and decodes every token
        # with one plain target step.
        plain = np.round(req.ttft_ms[at] + req.output_tokens[at] * req.step_ms[at], 1)
        plain = np.maximum(plain, req.ttft_ms[at])
        delay = (plain - req.e2e_ms[at]) / 1000.0
        made = [
            v11.shadow_event(events[o], route, e2e, step, str(truths[i]),
                             f"shadow-{i % route.replicas}")
            for o, i, e2e, step in zip(origin.tolist(), at.tolist(), plain.tolist(),
                                       req.step_ms[at].tolist(), strict=True)
        ]
        self.twins = (origin, delay, made)

    def _events(
        self,
        req: Requests,
        variant: np.ndarray,
        evicted: np.ndarray,
        out_ts: np.ndarray,
        keep: np.ndarray,
        engine: str,
        candidate: np.ndarray | None = None,
    ) -> list[dict[str, Any]]:
        route = self.route
        idx = np.flatnonzero(keep)
        if not len(idx):
            return []
        arm = np.zeros(len(keep), dtype=np.int64) if candidate is None else candidate.astype(
            np.int64
        )
        # one template per (metadata variant, arm): the candidate may serve another draft
        templates: dict[int, tuple[dict[str, str], dict[str, str] | None]] = {}
        code = variant * 2 + arm
        for c in np.unique(code[idx]).tolist():
            target_model, draft_model = self.effects.variant(c // 2)
            change = self.change
            if (c % 2 and change is not None and change.draft is not None
                    and draft_model is not None
                    and draft_model.tokenizer == change.draft.tokenizer):
                draft_model = change.draft
            templates[c] = (target_model.as_dict(), draft_model.as_dict() if draft_model else None)
        experiment = self.experiment
        has_draft = route.draft is not None
        method, params, temp = route.method, self.params, route.temperature
        pods = self.pods
        columns = zip(
            format_ts(out_ts[idx]),
            (STATUSES[s] for s in req.status[idx].tolist()),
            code[idx].tolist(),
            req.drafted[idx].tolist(),
            req.accepted[idx].tolist(),
            req.verify_steps[idx].tolist(),
            req.per_position[idx].tolist(),
            req.k[idx].tolist(),
            req.prompt_tokens[idx].tolist(),
            req.output_tokens[idx].tolist(),
            req.ttft_ms[idx].tolist(),
            req.e2e_ms[idx].tolist(),
            req.batch_size[idx].tolist(),
            (pods[i] for i in req.instance[idx].tolist()),
            evicted[idx].tolist(),
            [True] * len(idx) if req.speculative is None else req.speculative[idx].tolist(),
            strict=True,
        )
        events = []
        for row in columns:
            ts, status, v, drafted, accepted, steps, per_pos, k = row[:8]
            prompt, output, ttft, e2e, batch, pod, was_evicted, speculative = row[8:]
            target, draft = templates[v]
            if not speculative:
                # served without speculation on the same target: no draft, no spec block
                events.append({
                    "request_id": "", "ts": ts, "route": route.name, "status": status,
                    "target": dict(target), "prompt_tokens": prompt, "output_tokens": output,
                    "ttft_ms": ttft, "e2e_ms": e2e, "batch_size": batch, "instance": pod,
                    "engine": engine, "temperature": temp,
                })
                continue
            spec: dict[str, Any] = {
                "num_speculative_tokens": k,
                "drafted_tokens": drafted,
                "accepted_tokens": accepted,
                "verify_steps": steps,
                "accepted_per_position": per_pos if len(per_pos) == k else per_pos[:k],
                "method": method,
            }
            if params:
                spec["params"] = dict(params)
            event: dict[str, Any] = {
                "request_id": "",
                "ts": ts,
                "route": route.name,
                "status": status,
                "target": dict(target),
            }
            if draft is not None:
                event["draft"] = dict(draft)
            event["spec"] = spec
            event["prompt_tokens"] = prompt
            event["output_tokens"] = output
            event["ttft_ms"] = ttft
            event["e2e_ms"] = e2e
            event["batch_size"] = batch
            event["instance"] = pod
            event["engine"] = engine
            event["temperature"] = temp
            if has_draft:
                event["draft_evicted"] = was_evicted
            if experiment is not None:
                event["experiment"] = {"name": experiment.name, "arm": ARMS[v % 2]}
            events.append(event)
        return events
