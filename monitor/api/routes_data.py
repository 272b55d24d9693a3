"""``/api/v1/ratios`` and ``/api/v1/latency``: the rollups, as ``specwatch ratios`` reads them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response

from monitor.aggregate.bucket import BucketStats
from monitor.aggregate.series import SeriesKey
from monitor.aggregate.sketch import LogHistogram
from monitor.api.models import Granularity, LatencyOut, RatioOut
from monitor.api.params import RouteParam, SinceParam, UntilParam, blank_as_none, time_range
from monitor.api.responses import ERRORS
from monitor.store.query import format_ratios
from monitor.store.store import Store

GranularityParam = Annotated[Granularity, Query(description="bucket size")]
_OPTIONAL = ("draft_model", "draft_revision", "draft_tokenizer", "method")
_CSV = {"text/csv": {"schema": {"type": "string"},
                     "example": "bucket_start,route,...\n2026-11-02T14:00:00Z,code,...\n"}}


def quantiles(h: LogHistogram) -> dict[str, Any]:
    return {"count": h.count, "p50": h.quantile(0.5), "p99": h.quantile(0.99), "mean": h.mean}


def latency_row(key: SeriesKey, start: datetime | None, granularity: str,
                stats: BucketStats) -> dict[str, Any]:
    """One ``/api/v1/latency`` item; absent draft fields are null, as in ``ratios``."""
    row: dict[str, Any] = key._asdict()
    for name in _OPTIONAL:
        row[name] = row[name] or None
    row.update(
        bucket_start=start, granularity=granularity, requests=stats.requests,
        errors=stats.errors, ttft_ms=quantiles(stats.ttft_ms), e2e_ms=quantiles(stats.e2e_ms),
        decode_tps=quantiles(stats.decode_tps), itl_p50_ms=quantiles(stats.itl_p50_ms),
        itl_p99_ms=quantiles(stats.itl_p99_ms),
    )
    return row


def router(store: Store, *, price_per_gpu_hour: float | None = None) -> APIRouter:
    """``price_per_gpu_hour`` (``cost.price_per_gpu_hour``) prices ``cost_per_success``."""
    r = APIRouter(prefix="/api/v1", tags=["rollups"])

    @r.get(
        "/ratios", response_model=list[RatioOut], summary="Acceptance ratio tables",
        description="Per series and bucket: the counts behind the acceptance ratio, task "
        "outcome rates, GPU-seconds and cost per successful task (at the configured "
        "`cost.price_per_gpu_hour`), exactly as `specwatch ratios --format json|csv` prints "
        "them (same filters, same bytes). Sorted by bucket start, then series.",
        responses={**ERRORS, 200: {"description": "JSON array, or CSV with a header row",
                                   "content": _CSV}},
    )
    def ratios(
        granularity: GranularityParam = "hour",
        route: RouteParam = None,
        since: SinceParam = None,
        until: UntilParam = None,
        fmt: Annotated[Literal["json", "csv"], Query(
            alias="format", description="json (default) or csv")] = "json",
    ) -> Response:
        start, end = time_range(since, until)
        rows = store.ratios(granularity=granularity, route=blank_as_none(route), since=start,
                            until=end, price_per_gpu_hour=price_per_gpu_hour)
        if fmt == "csv":
            return Response(format_ratios(rows, "csv"), media_type="text/csv; charset=utf-8")
        return Response(format_ratios(rows, "json"), media_type="application/json")

    @r.get(
        "/latency", response_model=list[LatencyOut], responses=ERRORS,
        summary="Latency and throughput quantiles",
        description="Per series and bucket start: p50/p99 (and mean) of time to first token, "
        "end-to-end latency, decode throughput and the requests' own inter-token gaps "
        "(`itl_p50_ms`: their median gaps, `itl_p99_ms`: their p99 gaps), read from the "
        "stored mergeable sketches, "
        "with request and error counts. `per_bucket=false` merges each series over the whole "
        "range into one row (`bucket_start` null).",
    )
    def latency(
        granularity: GranularityParam = "hour",
        route: RouteParam = None,
        since: SinceParam = None,
        until: UntilParam = None,
        per_bucket: Annotated[bool, Query(
            description="one row per bucket (default), or one per series over the range")] = True,
    ) -> list[dict[str, Any]]:
        start, end = time_range(since, until)
        route = blank_as_none(route)
        if per_bucket:
            buckets = store.buckets(granularity=granularity, route=route, since=start, until=end)
            items = sorted(buckets.items(), key=lambda kv: (kv[0][1], kv[0][0]))
            return [latency_row(key, at, granularity, s) for (key, at), s in items]
        merged = store.stats(granularity=granularity, route=route, since=start, until=end)
        return [latency_row(key, None, granularity, merged[key]) for key in sorted(merged)]

    return r
