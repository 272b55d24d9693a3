"""A cap on request bodies, enforced before the app reads them.

Only ``POST /api/v1/silences`` takes a body, and a silence is a few hundred bytes; without a
cap uvicorn would hand any upload to FastAPI, which reads it whole into memory before the
validation that rejects it. A declared ``Content-Length`` over the cap is refused without
reading a byte; a chunked body is counted as it arrives and refused at the first chunk past
the cap. Either way the answer is the API's error shape with 413.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from monitor.api.errors import error_response

MAX_BODY_BYTES = 64 * 1024


class _TooLarge(Exception):
    """Raised from ``receive`` when the body passes the cap; the app's answer to it (400,
    500) is replaced by the 413."""


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # uvicorn's parser refuses these before we are called
    return None


class BodyLimit:
    """Answers 413 to any HTTP request whose body is longer than ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _refusal(self) -> JSONResponse:
        return error_response(413, "request body too large",
                              f"at most {self.max_bytes} bytes are accepted")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _declared_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refusal()(scope, receive, send)
            return
        received = 0
        too_large = False
        started = False

        async def counting_receive() -> Message:
            nonlocal received, too_large
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    too_large = True
                    raise _TooLarge
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if too_large:
                return  # whatever the app makes of the interrupted read is not sent
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except Exception:
            if not too_large:
                raise
        if too_large and not started:
            await self._refusal()(scope, receive, send)
