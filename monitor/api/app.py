"""The FastAPI app factory: the endpoints on one :class:`Store`, errors, auth, metrics.

Endpoints are plain ``def`` functions: FastAPI runs them in its thread pool, and the store is
thread-safe (each call its own connection and transaction), so a slow query never blocks the
event loop or another request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.openapi.utils import get_openapi
from prometheus_client import CollectorRegistry

from monitor.api import (
    routes_alerting,
    routes_changes,
    routes_data,
    routes_detection,
    routes_gate,
    routes_health,
    routes_policy,
)
from monitor.api.auth import BearerAuth, is_protected
from monitor.api.errors import install_error_handlers
from monitor.api.metrics import ApiMetrics, MetricsMiddleware
from monitor.api.params import reject_unknown_query
from monitor.api.routes_view import store_routes_view
from monitor.changes import JudgeSettings
from monitor.config import Config
from monitor.gate import GateSettings
from monitor.store.store import Store

API_VERSION = "1"
DESCRIPTION = """\
specwatch's per-route speculative-decoding history and decisions, read from its store.

* **rollups**: exact acceptance ratio tables (`/api/v1/ratios`, same rows as
  `specwatch ratios`) and latency/throughput quantiles (`/api/v1/latency`).
* **detection**: routes, segments, baselines and keep/turn-off recommendations.
* **alerting**: alert state changes, episodes, silences (add and expire).
* **changes**: each setup change on a route judged against the setup it replaced
  (`/api/v1/changes`, as `specwatch changes`).
* **policy**: where to speculate and how far, per slice of pre-request signals, judged on
  held-out traffic (`/api/v1/policy`, as `specwatch policy --format json`).
* **operations**: `/healthz`, `/readyz`, `/metrics`.

Times are RFC 3339 in UTC. Every error is `{"error": "...", "detail": ...}`; a bad parameter
is a 400 whose `error` names it. When the server has `SPECWATCH_API_TOKEN`, `/api/...` and
`/metrics` need `Authorization: Bearer <token>`.
"""


def create_app(
    store: Store,
    *,
    registry: CollectorRegistry | None = None,
    token: str | None = None,
    status: Callable[[], dict[str, Any]] | None = None,
    routes_view: Callable[[], list[dict[str, Any]]] | None = None,
    changes: JudgeSettings | None = None,
    price_per_gpu_hour: float | None = None,
    gate: GateSettings | None = None,
    config: Config | None = None,
) -> FastAPI:
    """The HTTP API over ``store``.

    ``registry``: served at ``/metrics`` (404 without), and the API's own request metrics
    are registered in it. ``token``: required as a bearer token on ``/api/...`` and
    ``/metrics``. ``status``: merged into ``/readyz`` (``{"ready": False, ...}`` makes it 503).
    ``routes_view``: the daemon's view of ``/api/v1/routes``; by default the detector state
    committed in the store. ``changes``: how ``/api/v1/changes`` judges (by default
    :class:`~monitor.changes.JudgeSettings`'s defaults; ``JudgeSettings.from_config`` for the
    configuration's ``detection.change_window`` and ``min_effect``). ``price_per_gpu_hour``:
    the configuration's ``cost.price_per_gpu_hour``, for cost per successful task (``None``:
    not given). ``config``: the cost models and ``policy`` settings ``/api/v1/policy``
    learns with (by default :class:`~monitor.config.Config`'s defaults).
    """
    app = FastAPI(
        title="specwatch API",
        version=API_VERSION,
        description=DESCRIPTION,
        openapi_tags=[
            {"name": "rollups", "description": "ratio tables and latency quantiles"},
            {"name": "detection", "description": "segments, baselines, recommendations"},
            {"name": "alerting", "description": "alert records, episodes, silences"},
            {"name": "changes", "description": "setup changes judged before and after"},
            {"name": "gate", "description": "the release gate: baseline against candidate"},
            {"name": "policy", "description": "where to speculate and how far"},
            {"name": "operations", "description": "health, readiness, metrics"},
        ],
    )
    install_error_handlers(app)
    strict = [Depends(reject_unknown_query)]
    app.include_router(routes_data.router(store, price_per_gpu_hour=price_per_gpu_hour),
                       dependencies=strict)
    app.include_router(routes_detection.router(routes_view or store_routes_view(store)),
                       dependencies=strict)
    app.include_router(routes_alerting.router(store), dependencies=strict)
    app.include_router(routes_changes.router(store, changes or JudgeSettings()),
                       dependencies=strict)
    # Probes and scrapers are left alone: a query string there is theirs (name[] filters).
    app.include_router(routes_gate.router(store, gate or GateSettings(),
                                          (changes or JudgeSettings()).window),
                       dependencies=strict)
    app.include_router(routes_policy.router(store, config or Config()), dependencies=strict)
    app.include_router(routes_health.router(store, registry=registry, status=status))
    # Added last = outermost: a request without the token reaches nothing else.
    if token:
        app.add_middleware(BearerAuth, token=token)
    if registry is not None:
        app.add_middleware(MetricsMiddleware, metrics=ApiMetrics.of(registry))
    app.openapi = lambda: _openapi(app, secured=bool(token))  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI, *, secured: bool) -> dict[str, Any]:
    """FastAPI's document, with the error shape this API really answers with: bad
    parameters are 400 (``ErrorOut``), never FastAPI's 422, and the bearer scheme on the
    protected paths when a token is set."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    doc = get_openapi(title=app.title, version=app.version, description=app.description,
                      routes=app.routes, tags=app.openapi_tags)
    for path, ops in doc.get("paths", {}).items():
        for op in ops.values():
            op.get("responses", {}).pop("422", None)
            if secured and is_protected(path):
                op["security"] = [{"bearer": []}]
            elif not secured or not is_protected(path):
                op.get("responses", {}).pop("401", None)
    schemas = doc.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    if secured:
        doc.setdefault("components", {})["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer",
                       "description": "the server's SPECWATCH_API_TOKEN"},
        }
    app.openapi_schema = doc
    return doc
