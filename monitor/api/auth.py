"""Bearer-token authentication of everything but the probes and the API's own description.

Enforced by an ASGI middleware rather than a FastAPI dependency: a dependency runs after the
body is parsed and the route matched, so a malformed body or an unknown path would be
answered (400, 404) before the token was checked. Here nothing is looked at without it.

Default deny: :data:`OPEN_PATHS` is the whole list of what answers without the token
(``/healthz`` and ``/readyz`` for probes, which cannot send headers everywhere; ``/docs``,
``/redoc`` and ``/openapi.json``, the same for everyone and holding no data). Every other path,
``/api/...``, ``/metrics`` and any route added later, needs it. The token is read from the
``Authorization`` header only, never from the query string (which ends up in access logs,
proxies and browser history).

The token is compared in constant time (SHA-256 digests of equal length, so not even its
length leaks) and never logged or echoed.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from starlette.types import ASGIApp, Receive, Scope, Send

from monitor.api.errors import error_response
from monitor.api.exceptions import ApiConfigError

TOKEN_ENV = "SPECWATCH_API_TOKEN"
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json", "/docs", "/docs/oauth2-redirect",
                        "/redoc"})


def is_protected(path: str) -> bool:
    """>>> [is_protected(p) for p in ("/api/v1/ratios", "/metrics", "/healthz", "/docs", "/x")]
    [True, True, False, False, True]
    """
    return path not in OPEN_PATHS


def token_from_env(env: Mapping[str, str]) -> str | None:
    """``SPECWATCH_API_TOKEN``, or ``None`` when unset or blank.

    >>> token_from_env({"SPECWATCH_API_TOKEN": "  s3cret-token "}), token_from_env({})
    ('s3cret-token', None)
    """
    token = env.get(TOKEN_ENV, "").strip()
    if not token:
        return None
    # A header carries visible ASCII only: any other token could never be presented.
    if not all("!" <= ch <= "~" for ch in token):
        raise ApiConfigError(f"{TOKEN_ENV} must be visible ASCII without spaces")
    return token


def _digest(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


def bearer_ok(header: bytes | None, expected_digest: bytes) -> bool:
    """Whether an ``Authorization`` header value presents the token."""
    if header is None:
        return False
    scheme, _, credentials = header.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return False
    return hmac.compare_digest(_digest(credentials.strip()), expected_digest)


class BearerAuth:
    """Refuses protected paths without ``Authorization: Bearer <token>`` (401)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = _digest(token.encode("ascii"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_protected(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        header = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), None)
        if bearer_ok(header, self._expected):
            await self.app(scope, receive, send)
            return
        error = "missing bearer token" if header is None else "wrong bearer token"
        response = error_response(
            401, error, "send the header 'Authorization: Bearer <SPECWATCH_API_TOKEN>'",
            {"WWW-Authenticate": 'Bearer realm="specwatch"'},
        )
        await response(scope, receive, send)
