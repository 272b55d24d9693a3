"""The error responses every endpoint documents."""

from __future__ import annotations

from typing import Any

from monitor.api.models import ErrorOut

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut, "description": "a bad parameter or body; `error` names it"},
    401: {"model": ErrorOut, "description": "missing or wrong bearer token (when the server "
          "has SPECWATCH_API_TOKEN)"},
    503: {"model": ErrorOut, "description": "the database is unavailable"},
}
