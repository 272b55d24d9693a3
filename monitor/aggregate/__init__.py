"""Per-series, per-minute event-time aggregation in mergeable form."""

from monitor.aggregate.bucket import BucketStats
from monitor.aggregate.series import SeriesKey, series_key
from monitor.aggregate.sketch import LogHistogram

__all__ = ["BucketStats", "LogHistogram", "SeriesKey", "series_key"]
