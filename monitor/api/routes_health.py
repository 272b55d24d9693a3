"""``/healthz`` (the process answers), ``/readyz`` (and can serve: database reachable and
migrated, plus the daemon's own status) and ``/metrics``.

The probes are ``async``: they run in the event loop, never in the worker threads that the
data endpoints queue for, so a burst of heavy queries cannot make a liveness probe time out.
/readyz's database check runs on a thread of its own (:class:`DatabaseProbe`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from functools import cache
from typing import Any

from fastapi import APIRouter, Response
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from sqlalchemy.exc import SQLAlchemyError

from monitor.api.models import ErrorOut, HealthOut, ReadyOut
from monitor.api.routes_view import clean
from monitor.store.db import current_revision, head_revision
from monitor.store.exceptions import StoreError
from monitor.store.store import Store

log = logging.getLogger(__name__)

_head = cache(head_revision)  # the migrations shipped with this build never change


def database_state(store: Store) -> tuple[str, str | None]:
    """``("ok", None)``, or ``("unreachable" | "not_migrated", reason)``.

    The reason never holds the URL: /readyz is open to anyone who can reach the port.
    """
    try:
        current = current_revision(store.engine)
    except (StoreError, SQLAlchemyError, OSError) as e:
        # The driver's error names the kind (OperationalError), never the URL.
        kind = type(e.__cause__ if isinstance(e, StoreError) and e.__cause__ else e).__name__
        log.warning("readiness: database unreachable: %s", kind, exc_info=e)
        return "unreachable", f"database unreachable ({kind})"
    head = _head()
    if current == head:
        return "ok", None
    if current is None:
        return "not_migrated", "database not migrated (run: specwatch db upgrade)"
    return "not_migrated", (f"database at schema revision {current}, this build needs {head} "
                            "(run: specwatch db upgrade)")


def _settle(fut: asyncio.Future[tuple[str, str | None]], state: tuple[str, str | None] | None,
            error: BaseException | None) -> None:
    if fut.done():  # the client went away
        return
    if error is not None:
        fut.set_exception(error)
    else:
        assert state is not None
        fut.set_result(state)


class DatabaseProbe:
    """:func:`database_state` on a thread of its own, one check at a time.

    Not in the API's worker threads: /readyz does not queue behind the requests waiting
    there. Probes that arrive while a check runs share its answer, so a flood of them
    costs one query and one thread.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._waiting: list[tuple[asyncio.AbstractEventLoop,
                                  asyncio.Future[tuple[str, str | None]]]] = []

    async def state(self) -> tuple[str, str | None]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[str, str | None]] = loop.create_future()
        with self._lock:
            self._waiting.append((loop, fut))
            first = len(self._waiting) == 1
        if first:
            threading.Thread(target=self._check, name="specwatch-readyz", daemon=True).start()
        return await fut

    def _check(self) -> None:
        state: tuple[str, str | None] | None = None
        error: BaseException | None = None
        try:
            state = database_state(self.store)
        except BaseException as e:  # noqa: B036 - handed to the waiting requests
            error = e
        with self._lock:
            waiting, self._waiting = self._waiting, []
        for loop, fut in waiting:
            try:
                loop.call_soon_threadsafe(_settle, fut, state, error)
            except RuntimeError:  # that request's event loop is closed
                pass


def readiness(database: tuple[str, str | None], status: Callable[[], dict[str, Any]] | None
              ) -> tuple[bool, dict[str, Any]]:
    """The /readyz answer from the database's state and the daemon's ``status`` (plain
    values: cheap enough for the event loop)."""
    database_, reason = database
    extra: dict[str, Any] = {}
    ready = database_ == "ok"
    if status is not None:
        try:
            extra = clean(jsonable_encoder(dict(status())))
        except Exception as e:  # a broken status hook is "not ready", never a 500
            log.warning("readiness: status() failed: %s", type(e).__name__, exc_info=e)
            extra = {}
            ready, reason = False, reason or "status check failed"
        if extra.get("ready") is False:
            ready = False
            reason = reason or str(extra.get("reason") or "not ready")
    return ready, {**extra, "ready": ready, "database": database_, "reason": reason}


def router(store: Store, *, registry: CollectorRegistry | None,
           status: Callable[[], dict[str, Any]] | None) -> APIRouter:
    r = APIRouter(tags=["operations"])
    probe = DatabaseProbe(store)

    @r.get("/healthz", response_model=HealthOut, summary="Liveness",
           description="200 while the process answers HTTP. Never needs a token.")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @r.get(
        "/readyz", response_model=ReadyOut, summary="Readiness",
        description="200 when the database is reachable and migrated to this build's schema "
        "(and, in the daemon, its own status is ready: partitions, caught up); 503 with "
        "`reason` otherwise. Never needs a token.",
        responses={503: {"model": ReadyOut, "description": "not ready; `reason` says why"}},
    )
    async def readyz() -> JSONResponse:
        ready, body = readiness(await probe.state(), status)
        return JSONResponse(body, status_code=200 if ready else 503)

    if registry is not None:
        @r.get(
            "/metrics", summary="Prometheus metrics", response_class=Response,
            description="The Prometheus text exposition of the process's registry.",
            responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}},
                             "description": "metrics"},
                       401: {"model": ErrorOut, "description": "missing or wrong bearer token"}},
        )
        def metrics() -> Response:
            return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return r
