"""Query parameters shared by the endpoints, read the way the CLI reads them."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Query, Request

from monitor.api.exceptions import ApiError, bad_parameter
from monitor.times import parse_time_arg

TIME_HELP = ("RFC 3339 time with a zone (2026-11-02T14:00:00Z) or a duration ago (30d, 2h); "
             "empty means unbounded")

RouteParam = Annotated[str | None, Query(
    max_length=4096, description="only this route (exact name); empty means every route")]
SinceParam = Annotated[str | None, Query(
    max_length=64, description="from (inclusive): " + TIME_HELP)]
UntilParam = Annotated[str | None, Query(
    max_length=64, description="to (exclusive): " + TIME_HELP)]


def blank_as_none(value: str | None) -> str | None:
    """``?route=`` is what a form sends for "no filter"."""
    return value if value else None


def time_param(name: str, value: str | None, now: datetime) -> datetime | None:
    """``value`` as :func:`monitor.times.parse_time_arg` reads it, or a 400 naming ``name``."""
    if not value:
        return None
    try:
        return parse_time_arg(value, now=now)
    except argparse.ArgumentTypeError as e:
        raise bad_parameter(name, str(e)) from None
    except (OverflowError, ValueError):
        # A duration reaching before year 1, or a zone pushing year 9999 over the edge.
        raise bad_parameter(name, f"time {value!r} is out of range") from None


def time_range(since: str | None, until: str | None) -> tuple[datetime | None, datetime | None]:
    """Both ends read against the same "now"; ``since`` after ``until`` is a 400."""
    now = datetime.now(UTC)
    start, end = time_param("since", since, now), time_param("until", until, now)
    if start is not None and end is not None and start > end:
        raise ApiError(400, "invalid query parameters 'since' and 'until': since is after until",
                       [{"in": "query", "parameter": "since",
                         "message": f"{start.isoformat()} is after until {end.isoformat()}"}])
    return start, end


def _query_names(dependant: Any) -> set[str]:
    names = {f.alias for f in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


def reject_unknown_query(request: Request) -> None:
    """A typo (``?granulrity=day``) would otherwise be ignored and answered with defaults."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    known = _query_names(dependant)
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        allowed = ", ".join(sorted(known)) or "none"
        raise ApiError(400, f"unknown query parameter '{unknown[0]}' (allowed: {allowed})",
                       [{"in": "query", "parameter": name, "message": "unknown parameter"}
                        for name in unknown])
