"""``--alerts-out``: every alert state change as one JSON line (alerts v1)."""

from __future__ import annotations

import sys
from typing import IO

from alerts.record import AlertRecord


class AlertsFile:
    """Appends records as their checkpoint commits (``-`` writes to stdout)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.count = 0
        self._fh: IO[bytes] = sys.stdout.buffer if path == "-" else open(path, "ab")  # noqa: SIM115

    def write(self, records: list[AlertRecord]) -> None:
        for r in records:
            self._fh.write(r.to_line())
        self._fh.flush()
        self.count += len(records)

    def close(self) -> None:
        if self.path != "-":
            self._fh.close()
