"""``/api/v1/gate``: the release gate, as ``specwatch gate --format json`` prints it."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from monitor.api.exceptions import ApiError
from monitor.api.params import SinceParam, UntilParam, blank_as_none, time_range
from monitor.api.responses import ERRORS
from monitor.gate import (
    GateSettings,
    UnknownChangeError,
    UnknownExperimentError,
    change_sides,
    experiment_sides,
    judge_gate,
)
from monitor.store.store import Store

ExperimentParam = Annotated[str | None, Query(max_length=4096,
                                              description="the experiment to gate")]
ChangeParam = Annotated[str | None, Query(max_length=256,
                                          description="the recorded change to gate")]


def router(store: Store, settings: GateSettings, change_window: float = 21600.0) -> APIRouter:
    """``change_window``: ``detection.change_window``, how far a change's sides reach."""
    r = APIRouter(prefix="/api/v1", tags=["gate"])

    @r.get(
        "/gate", responses={**ERRORS, 404: ERRORS[400] | {
            "description": "no such experiment or change"}},
        summary="Release gate: baseline against candidate",
        description="Exactly one of `experiment` (arms `baseline` and `candidate`) or "
        "`change` (the replaced setup against the new one). `verdict` is `pass`, `fail` "
        "(`failures` names the routes and metrics) or `insufficient_data` "
        "(`requests_needed` per side), on always-valid tests: poll as often as you like. "
        "The document is described field by field in docs/gate.md.",
    )
    def gate(experiment: ExperimentParam = None, change: ChangeParam = None,
             since: SinceParam = None, until: UntilParam = None) -> dict[str, Any]:
        experiment, change = blank_as_none(experiment), blank_as_none(change)
        if (experiment is None) == (change is None):
            raise ApiError(400, "give exactly one of 'experiment' and 'change'",
                           [{"in": "query", "parameter": "experiment",
                             "message": "exactly one of experiment and change"}])
        start, end = time_range(since, until)
        try:
            if experiment is not None:
                sides = experiment_sides(store, experiment, start, end)
            else:
                assert change is not None
                sides = change_sides(store, change, window=change_window, since=start,
                                     until=end)
        except (UnknownExperimentError, UnknownChangeError) as e:
            raise ApiError(404, str(e)) from None
        return judge_gate(sides, settings).to_json()

    return r
