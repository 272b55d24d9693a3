"""``/api/v1/alerts``, ``/api/v1/episodes`` and ``/api/v1/silences``: what the alerting CLI
(``monitor/cli_alerting.py``) shows and does, over HTTP."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response

from alerts.silences import Silence
from monitor.api.exceptions import ApiError
from monitor.api.models import AlertOut, EpisodeOut, RuleName, SilenceIn, SilenceOut
from monitor.api.params import RouteParam, SinceParam, UntilParam, blank_as_none, time_range
from monitor.api.responses import ERRORS
from monitor.api.routes_view import clean
from monitor.durations import parse_duration
from monitor.store.store import Store

ACTIVE = ("pending", "firing", "resolving")
ENDED = ("resolved", "dropped")
# Both databases store ids as signed 64-bit integers; larger ones cannot name a row.
MAX_ID = 2**63 - 1


def silence_json(s: Silence, now: datetime) -> dict[str, Any]:
    state = "active" if s.active(now) else ("ended" if s.ends_at <= now else "future")
    return {"id": s.id, "route": s.route, "rule": s.rule, "starts_at": s.starts_at,
            "ends_at": s.ends_at, "reason": s.reason, "created_by": s.created_by,
            "state": state}


def _body_error(field: str, message: str) -> ApiError:
    return ApiError(400, f"invalid body field '{field}': {message}",
                    [{"in": "body", "parameter": field, "message": message}])


def silence_window(body: SilenceIn, now: datetime) -> tuple[datetime, datetime]:
    """(starts_at, ends_at) of a new silence, or a 400 naming the field at fault."""
    if (body.duration is None) == (body.ends_at is None):
        raise ApiError(400, "give exactly one of 'duration' and 'ends_at'",
                       [{"in": "body", "parameter": "duration",
                         "message": "give exactly one of 'duration' and 'ends_at'"}])
    try:
        starts = now if body.starts_at is None else body.starts_at.astimezone(UTC)
    except (OverflowError, ValueError):
        raise _body_error("starts_at", "out of range") from None
    if body.duration is not None:
        value = body.duration
        if isinstance(value, bool) or not isinstance(value, str | int | float) or (
                isinstance(value, str) and len(value) > 64):
            raise _body_error("duration", "want a duration like '2h' or '90m', or a number "
                              "of seconds")
        try:
            seconds = parse_duration(value)
        except ValueError as e:
            raise _body_error("duration", str(e)) from None
        if seconds <= 0:
            raise _body_error("duration", "a silence must last more than 0s")
        try:
            ends = starts + timedelta(seconds=seconds)
        except OverflowError:
            raise _body_error("duration", f"{body.duration!r} ends after year 9999") from None
    else:
        assert body.ends_at is not None
        try:
            ends = body.ends_at.astimezone(UTC)
        except (OverflowError, ValueError):
            raise _body_error("ends_at", "out of range") from None
    if ends <= now:
        raise _body_error("ends_at" if body.ends_at else "duration",
                          "the silence would already be over")
    if ends <= starts:
        raise _body_error("ends_at", "the silence must end after it starts")
    return starts, ends


def router(store: Store) -> APIRouter:
    r = APIRouter(prefix="/api/v1", tags=["alerting"])

    @r.get(
        "/alerts", response_model=list[AlertOut], responses=ERRORS,
        summary="Alert state changes",
        description="Every alert condition change (alerts v1 records from `alert_events`), "
        "in decision order. `since`/`until` filter on the decision time `at`.",
    )
    def alerts(
        route: RouteParam = None,
        rule: Annotated[RuleName | None, Query(description="only this rule")] = None,
        since: SinceParam = None,
        until: UntilParam = None,
    ) -> list[dict[str, Any]]:
        start, end = time_range(since, until)
        records = store.alerts(route=blank_as_none(route), rule=rule, since=start, until=end)
        return [clean(a.to_json()) for a in records]

    @r.get(
        "/episodes", response_model=list[EpisodeOut], responses=ERRORS,
        summary="Alert episodes",
        description="Episodes as the alert lifecycle tracks them, oldest first (what "
        "`specwatch alerts` lists). `active=true`: pending, firing or resolving; "
        "`active=false`: resolved or dropped; absent: all.",
    )
    def episodes(
        route: RouteParam = None,
        active: Annotated[bool | None, Query(description="open episodes only, or ended only")]
        = None,
    ) -> list[dict[str, Any]]:
        states = None if active is None else (ACTIVE if active else ENDED)
        rows = store.alerting.episodes(states=states, route=blank_as_none(route))
        return [clean(row) for row in rows]

    @r.get(
        "/silences", response_model=list[SilenceOut], responses=ERRORS,
        summary="Silences", description="Silences in force or still to come, newest first; "
        "`all=true` adds the ended ones (`specwatch silence list [--all]`).",
    )
    def silences(
        include_all: Annotated[bool, Query(alias="all", description="ended silences too")]
        = False,
    ) -> list[dict[str, Any]]:
        now = datetime.now(UTC)
        found = store.alerting.silences(active_at=None if include_all else now)
        return [silence_json(s, now) for s in found]

    @r.post(
        "/silences", response_model=SilenceOut, status_code=201, responses=ERRORS,
        summary="Add a silence",
        description="Mute new pages and reminders of a route's alerts (route globs allowed), "
        "optionally of one rule, for `duration` ('2h') or until `ends_at` "
        "(`specwatch silence add`). The daemon applies it within seconds.",
    )
    def add_silence(body: SilenceIn) -> dict[str, Any]:
        now = datetime.now(UTC)
        starts, ends = silence_window(body, now)
        s = store.alerting.add_silence(body.route, body.rule, starts, ends, body.reason,
                                       body.created_by or "api", now)
        return silence_json(s, now)

    @r.delete(
        "/silences/{silence_id}", status_code=204, response_class=Response,
        responses={**ERRORS, 404: {"model": ERRORS[400]["model"],
                                   "description": "no such silence in force"}},
        summary="Expire a silence", description="End a silence now (`specwatch silence "
        "expire`). 404 when there is no such silence still in force.",
    )
    def expire_silence(
        silence_id: Annotated[int, Path(ge=1, le=MAX_ID, description="the silence's id")],
    ) -> Response:
        if not store.alerting.expire_silence(silence_id, datetime.now(UTC)):
            raise ApiError(404, f"no silence {silence_id} in force",
                           [{"in": "path", "parameter": "silence_id",
                             "message": "no such silence in force"}])
        return Response(status_code=204)

    return r
