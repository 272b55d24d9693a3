"""``/healthz`` (the process answers), ``/readyz`` (and can serve: database reachable and
migrated, plus the daemon's own status) and ``/metrics``."""

from __future__ import annotations

import logging
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
from monitor.store.store import Store

log = logging.getLogger(__name__)

_head = cache(head_revision)  # the migrations shipped with this build never change


def database_state(store: Store) -> tuple[str, str | None]:
    """``("ok", None)``, or ``("unreachable" | "not_migrated", reason)``.

    The reason never holds the URL: /readyz is open to anyone who can reach the port.
    """
    try:
        current = current_revision(store.engine)
    except (SQLAlchemyError, OSError) as e:
        log.warning("readiness: database unreachable: %s", type(e).__name__, exc_info=e)
        return "unreachable", f"database unreachable ({type(e).__name__})"
    head = _head()
    if current == head:
        return "ok", None
    if current is None:
        return "not_migrated", "database not migrated (run: specwatch db upgrade)"
    return "not_migrated", (f"database at schema revision {current}, this build needs {head} "
                            "(run: specwatch db upgrade)")


def readiness(store: Store, status: Callable[[], dict[str, Any]] | None
              ) -> tuple[bool, dict[str, Any]]:
    database, reason = database_state(store)
    extra: dict[str, Any] = {}
    ready = database == "ok"
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
    return ready, {**extra, "ready": ready, "database": database, "reason": reason}


def router(store: Store, *, registry: CollectorRegistry | None,
           status: Callable[[], dict[str, Any]] | None) -> APIRouter:
    r = APIRouter(tags=["operations"])

    @r.get("/healthz", response_model=HealthOut, summary="Liveness",
           description="200 while the process answers HTTP. Never needs a token.")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @r.get(
        "/readyz", response_model=ReadyOut, summary="Readiness",
        description="200 when the database is reachable and migrated to this build's schema "
        "(and, in the daemon, its own status is ready: partitions, caught up); 503 with "
        "`reason` otherwise. Never needs a token.",
        responses={503: {"model": ReadyOut, "description": "not ready; `reason` says why"}},
    )
    def readyz() -> JSONResponse:
        ready, body = readiness(store, status)
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
