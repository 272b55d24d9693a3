"""``specwatch report``: a route's history and the detectors' verdicts on one HTML page.

:func:`gather_report` (``data.py``) reads the store; :func:`render_html` (``html.py``) draws
the page with the charts of ``charts.py``. Imported on first use: the command line must not
pay for matplotlib unless a report is drawn.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from monitor.report.data import RouteReport, gather_report
    from monitor.report.html import render_html

_LAZY = {
    "RouteReport": "monitor.report.data",
    "gather_report": "monitor.report.data",
    "render_html": "monitor.report.html",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


__all__ = ["RouteReport", "gather_report", "render_html"]
