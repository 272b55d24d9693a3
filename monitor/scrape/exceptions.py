"""The scraper's errors."""

from __future__ import annotations

from monitor.exceptions import SpecwatchError

__all__ = ["ScrapeError"]


class ScrapeError(SpecwatchError):
    """A scrape that yields nothing usable: no answer, an HTTP error, unparseable text."""
