"""What ``specwatch report`` accepts, importable without the report's data layer (the
command line is built on every start, and ``monitor.report.data`` costs most of a second)."""

GRANULARITIES = ("auto", "minute", "hour", "day")
