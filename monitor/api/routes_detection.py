"""``/api/v1/routes``: each route with its segments, baselines and recommendations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter

from monitor.api.models import RouteOut
from monitor.api.params import RouteParam, blank_as_none
from monitor.api.responses import ERRORS
from monitor.api.routes_view import clean


def router(view: Callable[[], list[dict[str, Any]]]) -> APIRouter:
    r = APIRouter(prefix="/api/v1", tags=["detection"])

    @r.get(
        "/routes", response_model=list[RouteOut], responses=ERRORS,
        summary="Routes, segments, baselines and recommendations",
        description="Per route: the rules firing on it and its segments (series x temperature "
        "bucket), each with its acceptance and throughput baselines and the break-even "
        "recommendation (`on`, `off`, `insufficient_data`) with the evidence and the "
        "recommended `num_speculative_tokens`. The daemon answers from its live state; "
        "`specwatch serve` from the detector state last committed to the database.",
    )
    def routes(route: RouteParam = None) -> list[dict[str, Any]]:
        wanted = blank_as_none(route)
        return [clean(r) for r in view() if wanted is None or r.get("route") == wanted]

    return r
