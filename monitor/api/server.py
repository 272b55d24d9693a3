"""Serving the API: the ``--http HOST:PORT`` value, the token rule, and uvicorn in a thread.

The daemon's main thread consumes Kafka; the API runs beside it in one background thread
with its own event loop (endpoints themselves run in that loop's thread pool). Signals stay
with the main thread: uvicorn only installs handlers when it runs there.
"""

from __future__ import annotations

import ipaddress
import logging
import re

import uvicorn
from starlette.types import ASGIApp

from monitor.api.auth import TOKEN_ENV
from monitor.api.exceptions import ApiConfigError
from monitor.api.limits import MAX_BODY_BYTES, BodyLimit
from monitor.httpserver import ThreadedServer

log = logging.getLogger(__name__)
API_WORKER_THREADS = 8
ACCESS_LOG = "uvicorn.access"
# Query parameters that look like credentials: the API reads the token from the header only,
# but a client that puts it in the URL must not get it written to our access log as well.
_CREDENTIAL_PARAM = re.compile(
    r"([?&](?:[^=&]*(?:token|key|secret|password|passwd|auth|credential|signature)[^=&]*)=)"
    r"[^&]*", re.IGNORECASE)


def redact_query(path: str) -> str:
    """``path`` with the values of credential-looking query parameters replaced.

    >>> redact_query("/api/v1/ratios?route=code&access_token=s3cret&API_KEY=k")
    '/api/v1/ratios?route=code&access_token=***&API_KEY=***'
    """
    return _CREDENTIAL_PARAM.sub(r"\1***", path)


def _redact_access_record(record: logging.LogRecord) -> bool:
    # uvicorn's access line: (client, method, path with query string, http version, status)
    args = record.args
    if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
        record.args = (*args[:2], redact_query(args[2]), *args[3:])
    return True


def _redact_scope_record(record: logging.LogRecord) -> bool:
    # uvicorn's TRACE log of ASGI messages prints the whole scope: headers and bodies as
    # placeholders already, but the query string as is.
    args = record.args
    if isinstance(args, tuple):
        record.args = tuple(
            {**a, "query_string": redact_query("?" + a["query_string"].decode("latin-1"))[1:]
             .encode("latin-1")}
            if isinstance(a, dict) and isinstance(a.get("query_string"), bytes) else a
            for a in args)
    return True


_LOG_FILTERS = ((ACCESS_LOG, _redact_access_record), ("uvicorn.asgi", _redact_scope_record))

# Where a bare port listens. Unlike Go's ":8080" (every interface), an address left out here
# means this machine only: exposing the API is always spelled out (0.0.0.0:8080, [::]:8080).
DEFAULT_HOST = "127.0.0.1"


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (IPv6 in brackets) as ``(host, port)``; port 0 picks a free one. A bare
    ``PORT`` or ``:PORT`` listens on loopback (:data:`DEFAULT_HOST`).

    >>> parse_listen("127.0.0.1:8080"), parse_listen("[::1]:9"), parse_listen("0.0.0.0:0")
    (('127.0.0.1', 8080), ('::1', 9), ('0.0.0.0', 0))
    >>> parse_listen("8080"), parse_listen(":9464")
    (('127.0.0.1', 8080), ('127.0.0.1', 9464))
    """
    text = value.strip()
    bare = text[1:] if text.startswith(":") else text
    if bare.isdigit():
        text = f"{DEFAULT_HOST}:{bare}"
    if text.startswith("["):
        host, closed, rest = text[1:].partition("]")
        if not closed or not rest.startswith(":"):
            raise ApiConfigError(f"cannot read listen address {value!r}: want [IPv6]:PORT, "
                                 "e.g. [::1]:8080")
        port_text = rest[1:]
        try:
            ipaddress.IPv6Address(host.split("%")[0])
        except ValueError:
            raise ApiConfigError(f"{host!r} in {value!r} is not an IPv6 address") from None
    else:
        host, colon, port_text = text.rpartition(":")
        if not colon:
            raise ApiConfigError(f"cannot read listen address {value!r}: want HOST:PORT, "
                                 "e.g. 127.0.0.1:8080")
        if ":" in host:
            raise ApiConfigError(f"IPv6 addresses go in brackets: [{host}]:{port_text}")
    if not host:
        raise ApiConfigError(
            f"listen address {value!r} has no host: give 127.0.0.1:{port_text or 'PORT'} for "
            f"this machine only, or 0.0.0.0:{port_text or 'PORT'} for every interface "
            f"(which needs {TOKEN_ENV})")
    if not port_text.isdigit() or int(port_text) > 65535:
        raise ApiConfigError(f"port {port_text!r} in {value!r} is not a number in 0-65535")
    return host, int(port_text)


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach ``host``.

    >>> [is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "0.0.0.0", "::", "10.1.2.3")]
    [True, True, True, False, False, False]
    """
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        addr = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False  # any other name may resolve anywhere
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def _every_interface(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_unspecified
    except ValueError:
        return False


def require_token(host: str, token: str | None) -> None:
    """Refuse to expose the API beyond this machine without a token."""
    if not token and not is_loopback(host):
        where = f"{host} (every interface)" if _every_interface(host) else host
        raise ApiConfigError(
            f"refusing to serve the HTTP API on {where} without a token: set {TOKEN_ENV} "
            "(clients send 'Authorization: Bearer <token>'), or listen on 127.0.0.1")


class ApiServer(ThreadedServer):
    """uvicorn serving ``app`` on ``host:port`` from a background thread.

    ``start()`` binds in the caller's thread (so a taken port fails there, and port 0 is
    resolved: ``.port``) and returns once uvicorn accepts connections; ``stop()`` lets
    in-flight requests finish (up to a few seconds) and joins the thread. Request bodies
    over ``max_body_bytes`` are refused with 413 before the app reads them.
    """

    label = "HTTP API"
    thread_name = "specwatch-api"
    error = ApiConfigError
    # Heavy queries at once: fewer than the store's pooled connections (5 + 10 overflow),
    # so the daemon's checkpoints, its jobs and /readyz always find one free.
    worker_threads = API_WORKER_THREADS

    def __init__(self, app: ASGIApp, host: str, port: int, *, access_log: bool = False,
                 max_body_bytes: int = MAX_BODY_BYTES) -> None:
        super().__init__(host, port)
        self.app = app
        self.access_log = access_log
        self.max_body_bytes = max_body_bytes

    def _config(self) -> uvicorn.Config:
        return uvicorn.Config(
            BodyLimit(self.app, self.max_body_bytes), lifespan="off",
            access_log=self.access_log, timeout_graceful_shutdown=5,
            log_config=None,  # the process's logging stays as it is; uvicorn's logs propagate
            server_header=False,  # no "server: uvicorn": nothing to fingerprint for free
            # h11 bounds a request head (httptools, if installed for the proxy, does not).
            http="h11",
        )

    def start(self) -> None:
        if self.running:
            raise RuntimeError("ApiServer already started")
        self.bind()
        for name, redact in _LOG_FILTERS:
            if redact not in logging.getLogger(name).filters:
                logging.getLogger(name).addFilter(redact)
        if self.access_log:
            # uvicorn cuts the access logger off (propagate=False) whenever a server runs
            # without it, process-wide; one that asks for it must get it back.
            logging.getLogger(ACCESS_LOG).propagate = True
        super().start()
        log.info("HTTP API listening on %s", self.url)

    def stop(self) -> None:
        if self.running:
            super().stop()
            log.info("HTTP API on %s stopped", self.url)
