"""``/api/v1/policy``: where to speculate and how far, as ``specwatch policy --format json``
prints it, computed from the store on request; ``/api/v1/policy/stored``: the newest policies
the daily job stored, so that the policy in force can be compared with a newer one.

Parameter mistakes are 400s naming the parameter (a hindsight feature among them: the message
says it is known only after the request ran). Nothing to learn from (no slice rollups in the
window, or no speculative traffic in the training window) is a 404 with the reason, as the
gate answers 404 when there is nothing to judge.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query

from monitor.api.exceptions import ApiError, bad_parameter
from monitor.api.params import RouteParam, blank_as_none, time_param
from monitor.api.responses import ERRORS
from monitor.config import Config
from monitor.policy.exceptions import PolicyError
from monitor.policy.features import parse_features
from monitor.policy.learn import compute_policy
from monitor.policy.slices import SliceRecord
from monitor.store.store import Store

__all__ = ["router", "stored_policy"]

_TIME = ("RFC 3339 time with a zone (2026-11-02T14:00:00Z) or a duration ago (30d, 2h); "
         "empty means the default")
TrainSinceParam = Annotated[str | None, Query(
    max_length=64, description="training window start: " + _TIME + " (the data's start)")]
TrainUntilParam = Annotated[str | None, Query(
    max_length=64, description="training window end and held-out window start: " + _TIME
    + " (the last policy.holdout_share of the data is held out)")]
HoldoutUntilParam = Annotated[str | None, Query(
    max_length=64, description="held-out window end: " + _TIME + " (the data's end)")]
FeaturesParam = Annotated[str | None, Query(
    max_length=4096, description="comma-separated: tags, tags.<key>, prompt_tokens, "
    "temperature, batch_size (default tags,batch_size; route and model pair always). "
    "Hindsight fields (spec.*, output_tokens, latencies, status, outcome, itl_ms, "
    "output_hash) are refused with a 400")]
LimitParam = Annotated[int, Query(ge=1, le=20, description="how many, newest first")]

NOT_FOUND = ERRORS[400] | {"description": "nothing to learn from: no slice rollups in the "
                           "window, or no speculative traffic in the training window"}


class _Read:
    """The records already read, handed to :func:`compute_policy` as its slice source: the
    store is read once, and an empty window is told apart from other refusals without
    reading the error's text."""

    def __init__(self, records: list[SliceRecord]) -> None:
        self.records = records

    def slice_records(self, since: datetime | None, until: datetime | None,
                      route: str | None) -> list[SliceRecord]:
        return self.records


def _features(text: str | None) -> tuple[str, ...] | None:
    if not text:
        return None  # the default features
    try:
        return parse_features(text)
    except PolicyError as e:
        # parse_features speaks to the command line ("--features x: ..."): the API names
        # its own parameter
        message = str(e).removeprefix("--features ")
        raise bad_parameter("features", message) from None


def _iso(t: datetime | None) -> str | None:
    if t is None:
        return None
    if t.tzinfo is None:  # stored as UTC; a driver may hand it back naive
        t = t.replace(tzinfo=UTC)
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def stored_policy(row: dict[str, Any]) -> dict[str, Any]:
    """One row of :meth:`Store.policies` as JSON: times as RFC 3339 UTC text.

    >>> t = datetime(2026, 11, 2, tzinfo=UTC)
    >>> stored_policy({"id": 3, "computed_at": t, "train_since": t, "train_until": t,
    ...                "holdout_until": None, "features": "tags,batch_size",
    ...                "document": {"version": 1}})["train_window"]
    {'since': '2026-11-02T00:00:00Z', 'until': '2026-11-02T00:00:00Z'}
    """
    return {
        "id": row["id"],
        "computed_at": _iso(row["computed_at"]),
        "train_window": {"since": _iso(row["train_since"]), "until": _iso(row["train_until"])},
        "holdout_until": _iso(row.get("holdout_until")),
        "features": row["features"],
        "document": row["document"],
    }


def router(store: Store, config: Config) -> APIRouter:
    """``config``: the cost models (``detection.cost_models``) and the ``policy`` settings
    the policy is learnt with."""
    r = APIRouter(prefix="/api/v1", tags=["policy"])

    @r.get(
        "/policy", responses={**ERRORS, 404: NOT_FOUND},
        summary="Where to speculate and how far, judged on held-out traffic",
        description="Learnt on demand from the slice rollups: per route, model pair and slice "
        "of pre-request signals, the predicted speedup of each draft length and the chosen "
        "setting; per model pair the draft length per batch-size bucket; the policy against "
        "all-on, all-off and per-route on/off on a later held-out window, with intervals; "
        "per route the share of e2e spent decoding and the predicted saving. The document of "
        "`specwatch policy --format json`.",
    )
    def policy(route: RouteParam = None, train_since: TrainSinceParam = None,
               train_until: TrainUntilParam = None, holdout_until: HoldoutUntilParam = None,
               features: FeaturesParam = None) -> dict[str, Any]:
        feats = _features(features)
        now = datetime.now(UTC)
        t_since = time_param("train_since", train_since, now)
        t_until = time_param("train_until", train_until, now)
        h_until = time_param("holdout_until", holdout_until, now)
        if t_since is not None and t_until is not None and t_since >= t_until:
            raise bad_parameter("train_since", f"{t_since.isoformat()} is not before "
                                f"train_until {t_until.isoformat()}")
        if h_until is not None and t_since is not None and h_until <= t_since:
            raise bad_parameter("holdout_until", f"{h_until.isoformat()} is not after "
                                f"train_since {t_since.isoformat()}")
        name = blank_as_none(route)
        records = store.slice_records(t_since, h_until, name)
        try:
            result = compute_policy(_Read(records), config, route=name, train_since=t_since,
                                    train_until=t_until, holdout_until=h_until,
                                    features=feats)
        except PolicyError as e:
            # the parameters were checked above: what is left is the data's answer
            raise ApiError(404, str(e)) from None
        return result.to_json()

    @r.get(
        "/policy/stored", responses=ERRORS,
        summary="The newest stored policies",
        description="What the daily job (`jobs.policy_cron`) stored, newest first: id, "
        "`computed_at`, the training window and held-out end its inputs covered, its "
        "features and the policy document. The first is the newest; compare it with the one "
        "in force. Empty when none was stored.",
    )
    def stored(limit: LimitParam = 2) -> list[dict[str, Any]]:
        return [stored_policy(row) for row in store.policies(limit)]

    return r
