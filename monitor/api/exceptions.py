"""Errors of the HTTP API."""

from __future__ import annotations

from typing import Any

from monitor.exceptions import SpecwatchError


class ApiConfigError(SpecwatchError):
    """The API cannot be served as asked: a bad ``--http`` address, or a non-loopback
    address without ``SPECWATCH_API_TOKEN``."""


class ApiError(Exception):
    """A request the API refuses on purpose: answered as ``{"error": ..., "detail": ...}``.

    Not a :class:`SpecwatchError`: it never leaves the app, the exception handler turns it
    into the response.
    """

    def __init__(self, status: int, error: str, detail: Any = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.detail = detail
        self.headers = headers


def bad_parameter(name: str, message: str, where: str = "query") -> ApiError:
    """A 400 naming the parameter: ``invalid query parameter 'since': ...``."""
    return ApiError(400, f"invalid {where} parameter '{name}': {message}",
                    [{"in": where, "parameter": name, "message": message}])
