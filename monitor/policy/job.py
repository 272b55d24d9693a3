"""The daily policy job: learn a policy over the last ``jobs.policy_window`` of history (the
last ``policy.holdout_share`` of it held out), store it with its inputs' time ranges, and
hand it to ``/metrics``. A stored policy is the one in force; the next day's is compared with
it in ``GET /api/v1/policy/stored`` and the report.

The window ends at the job's scheduled time, on an hour boundary, so a late run or a rerun
learns from the same hours.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from monitor.config import Config
from monitor.policy.exceptions import PolicyError
from monitor.policy.learn import compute_policy

__all__ = ["run_policy_job"]

log = logging.getLogger(__name__)


def _hour(t: datetime) -> datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def run_policy_job(store: Any, config: Config, end: datetime,
                   publish: Callable[[dict[str, Any]], object] | None = None
                   ) -> dict[str, Any] | None:
    """Compute and store the policy of ``[end - policy_window, end)``; the stored row (with
    its id), or ``None`` when there is nothing to learn from (logged, not an error)."""
    until = _hour(end.astimezone(UTC))
    window = timedelta(seconds=config.jobs.policy_window)
    since = until - window
    hours = int(window.total_seconds() // 3600)
    train_until = since + timedelta(hours=max(1, round(hours * (1 - config.policy.holdout_share))))
    try:
        result = compute_policy(store, config, train_since=since, train_until=train_until,
                                holdout_until=until)
    except PolicyError as e:
        log.info("policy job for %s .. %s: %s", since.isoformat(), until.isoformat(), e)
        return None
    document = result.to_json()
    features = ",".join(result.features)
    policy_id = store.save_policy(computed_at=end, train_since=since, train_until=train_until,
                                  holdout_until=until, features=features, document=document)
    row = {"id": policy_id, "computed_at": end, "train_since": since,
           "train_until": train_until, "holdout_until": until, "features": features,
           "document": document}
    if publish is not None:
        publish(row)
    log.info("policy job: policy %d learnt on %s .. %s, judged on %s .. %s (%d slices)",
             policy_id, since.isoformat(), train_until.isoformat(), train_until.isoformat(),
             until.isoformat(), len(document.get("slices") or []))
    return row
