"""Task outcome and GPU cost derived from additive counts (telemetry v1.1).

One definition for every holder of the counts: a bucket (:class:`~monitor.aggregate.bucket.
BucketStats`) and a stored ratio row (:class:`~monitor.store.query.RatioRow`) both read them
through :class:`OutcomeRates`.

>>> class Counts(OutcomeRates):
...     requests, successes, gpu_seconds, gpu_reported_requests = 10, 8, 4.0, 5
...     outcome_ok_true, outcome_ok_reported = 8, 9
...     schema_valid_true = schema_valid_reported = 0
...     tool_calls_valid_true = tool_calls_valid_reported = 0
>>> c = Counts()
>>> c.success_rate, round(c.ok_rate, 3), c.schema_valid_rate, c.successes_per_gpu_second
(0.8, 0.889, None, 2.0)
>>> cost_per_success(c.gpu_seconds_per_success, price_per_gpu_hour=3.6)
0.0005
"""

from __future__ import annotations

__all__ = ["OutcomeRates", "cost_per_success"]


def _rate(num: int, den: int) -> float | None:
    return num / den if den else None


def cost_per_success(gpu_seconds_per_success: float | None,
                     price_per_gpu_hour: float | None) -> float | None:
    """GPU-seconds per successful task x price per GPU-hour / 3600; ``None`` without a price
    or a success."""
    if gpu_seconds_per_success is None or price_per_gpu_hour is None:
        return None
    return gpu_seconds_per_success * price_per_gpu_hour / 3600.0


class OutcomeRates:
    """Rates over the counts of the class it is mixed into (``requests``, ``successes``,
    ``outcome_*_true`` / ``_reported``, ``gpu_seconds``, ``gpu_reported_requests``). A rate
    over an outcome counts only the requests that report it: absent is unknown, never
    false."""

    __slots__ = ()
    requests: int
    successes: int
    outcome_ok_true: int
    outcome_ok_reported: int
    schema_valid_true: int
    schema_valid_reported: int
    tool_calls_valid_true: int
    tool_calls_valid_reported: int
    gpu_seconds: float
    gpu_reported_requests: int

    @property
    def success_rate(self) -> float | None:
        """Successful tasks / requests; ``None`` without requests."""
        return _rate(self.successes, self.requests)

    @property
    def ok_rate(self) -> float | None:
        """``outcome.ok`` true / reported; ``None`` when no request reports it."""
        return _rate(self.outcome_ok_true, self.outcome_ok_reported)

    @property
    def schema_valid_rate(self) -> float | None:
        return _rate(self.schema_valid_true, self.schema_valid_reported)

    @property
    def tool_calls_valid_rate(self) -> float | None:
        return _rate(self.tool_calls_valid_true, self.tool_calls_valid_reported)

    @property
    def gpu_seconds_estimated_share(self) -> float | None:
        """The share of requests whose GPU time is the pipeline's estimate, not reported."""
        return _rate(self.requests - self.gpu_reported_requests, self.requests)

    @property
    def gpu_seconds_per_success(self) -> float | None:
        """All GPU time spent (failed requests included) per successful task; ``None``
        without a success or without GPU time (rows stored before telemetry v1.1)."""
        if not self.successes or self.gpu_seconds <= 0.0:
            return None
        return self.gpu_seconds / self.successes

    @property
    def successes_per_gpu_second(self) -> float | None:
        return self.successes / self.gpu_seconds if self.gpu_seconds > 0.0 else None
