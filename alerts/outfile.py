"""``--alerts-out``: every alert state change as one JSON line (alerts v1)."""

from __future__ import annotations

import sys
from typing import IO

from monitor.alert_record import AlertRecord
from monitor.exceptions import SpecwatchError


class AlertsFile:
    """Appends records as their checkpoint commits (``-`` writes to stdout)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.count = 0
        try:
            self._fh: IO[bytes] = (sys.stdout.buffer if path == "-"
                                   else open(path, "ab"))  # noqa: SIM115
        except OSError as e:  # before anything is read: one line, nothing lost
            raise SpecwatchError(f"cannot write the alerts file {path}: {e.strerror or e}") from e

    def write(self, records: list[AlertRecord]) -> None:
        for r in records:
            self._fh.write(r.to_line())
        self._fh.flush()
        self.count += len(records)

    def close(self) -> None:
        if self.path != "-":
            self._fh.close()
