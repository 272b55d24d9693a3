"""``/api/v1/changes``: setup changes judged before and after, as ``specwatch changes
--format json`` prints them."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from monitor.api.models import ChangeOut
from monitor.api.params import RouteParam, SinceParam, blank_as_none, time_range
from monitor.api.responses import ERRORS
from monitor.changes import JudgeSettings, judge_changes
from monitor.store.store import Store


def router(store: Store, settings: JudgeSettings) -> APIRouter:
    r = APIRouter(prefix="/api/v1", tags=["changes"])

    @r.get(
        "/changes", response_model=list[ChangeOut], responses=ERRORS,
        summary="Setup changes, before and after",
        description="Each change of setup on a route (target or draft revision, tokenizer, "
        "draft length, method, speculation on/off) with the setup it replaced, and per "
        "metric (acceptance, mean accepted length, p50 decode throughput, p50/p99 TTFT and "
        "e2e latency, error rate) a verdict `better`, `worse`, `same` or `insufficient_data` "
        "with its 95% interval and counts, plus one verdict per change. Ordered by `at`; "
        "`since` filters on it.",
    )
    def changes(route: RouteParam = None, since: SinceParam = None) -> list[dict[str, Any]]:
        start, _ = time_range(since, None)
        judged = judge_changes(store, route=blank_as_none(route), since=start,
                               settings=settings)
        return [j.to_json() for j in judged]

    return r
