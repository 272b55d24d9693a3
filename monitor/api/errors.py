"""One error shape for every failure: ``{"error": "...", "detail": ...}``.

Bad parameters and bodies are 400 with the parameter named (FastAPI's own 422 is folded in:
one status for "your request is wrong"); an unreachable database is 503; anything else is a
500 whose body says nothing of the code (the traceback goes to the log only).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException

from monitor.api.exceptions import ApiError
from monitor.store.exceptions import StoreUnavailableError

log = logging.getLogger(__name__)

_WHERE = {"query": "query", "path": "path", "header": "header", "cookie": "cookie"}


def error_response(status: int, error: str, detail: Any = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": error, "detail": detail}, status_code=status, headers=headers)


def _problem(err: dict[str, Any]) -> dict[str, Any]:
    loc: Sequence[Any] = err.get("loc") or ()
    where = str(loc[0]) if loc else "request"
    name = ".".join(str(p) for p in loc[1:])
    msg = str(err.get("msg", "invalid"))
    if err.get("type") == "json_invalid":
        where, name = "body", ""
        msg = "malformed JSON: " + str((err.get("ctx") or {}).get("error", msg))
    elif where == "body" and not name and err.get("type") == "missing":
        msg = "a JSON object is required"
    elif where == "body" and not name:
        msg = "must be a JSON object: " + msg
    return {"in": where, "parameter": name or None, "message": msg}


def _validation_message(problem: dict[str, Any]) -> str:
    where, name, msg = problem["in"], problem["parameter"], problem["message"]
    if where in _WHERE and name:
        return f"invalid {where} parameter '{name}': {msg}"
    if where == "body" and name:
        return f"invalid body field '{name}': {msg}"
    if where == "body":
        return f"invalid request body: {msg}"
    return f"invalid request: {msg}"


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    # The submitted values are left out on purpose: they could be large, or secret.
    problems = [_problem(dict(e)) for e in exc.errors()]
    first = _validation_message(problems[0]) if problems else "invalid request"
    if len(problems) > 1:
        first += f" (and {len(problems) - 1} more)"
    return error_response(400, first, problems)


async def _on_api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.error, exc.detail, exc.headers)


async def _on_http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    error = exc.detail if isinstance(exc.detail, str) else "request refused"
    if exc.status_code == 404 and error == "Not Found":
        error = f"no such endpoint: {request.url.path}"
    elif exc.status_code == 405:
        error = f"method {request.method} not allowed on {request.url.path}"
    return error_response(exc.status_code, error, None, dict(exc.headers or {}))


async def _on_database(request: Request, exc: Exception) -> JSONResponse:
    # The driver's message may carry host names; the log gets it, the client does not.
    log.warning("database error serving %s %s: %s", request.method, request.url.path,
                type(exc).__name__, exc_info=exc)
    return error_response(503, "database unavailable", {"type": type(exc).__name__})


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    # One line here; the server (uvicorn) logs the traceback when the exception reaches it.
    log.error("unexpected error serving %s %s: %s", request.method, request.url.path,
              type(exc).__name__)
    return error_response(500, "internal error", None)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(ApiError, _on_api_error)
    app.add_exception_handler(HTTPException, _on_http)
    app.add_exception_handler(DBAPIError, _on_database)
    # The store's own "unreachable" and a pool whose connections all hang: 503 as well.
    app.add_exception_handler(StoreUnavailableError, _on_database)
    app.add_exception_handler(PoolTimeoutError, _on_database)
    app.add_exception_handler(Exception, _on_unexpected)
