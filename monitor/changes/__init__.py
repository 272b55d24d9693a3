"""The change report: every setup change on a route judged against the setup it replaced.

``judge.py`` reads the two sides of a change from the rollups and judges each metric
(``metrics.py``, intervals in ``stats.py``) and the change as a whole; ``text.py`` renders
the judgements as JSON and as the terminal table of ``specwatch changes``. The API, the HTML
report and ``/metrics`` read the same :class:`ChangeJudgement`.
"""

from __future__ import annotations

from monitor.changes.judge import (
    DEFAULT_MIN_REQUESTS,
    DEFAULT_WINDOW,
    ChangeJudgement,
    JudgeSettings,
    judge_change,
    judge_changes,
)
from monitor.changes.metrics import METRICS, MetricVerdict

__all__ = ["DEFAULT_MIN_REQUESTS", "DEFAULT_WINDOW", "METRICS", "ChangeJudgement",
           "JudgeSettings", "MetricVerdict", "judge_change", "judge_changes"]
