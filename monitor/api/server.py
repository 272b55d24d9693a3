"""Serving the API: the ``--http HOST:PORT`` value, the token rule, and uvicorn in a thread.

The daemon's main thread consumes Kafka; the API runs beside it in one background thread
with its own event loop (endpoints themselves run in that loop's thread pool). Signals stay
with the main thread: uvicorn only installs handlers when it runs there.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
from collections.abc import Sequence

import uvicorn
from starlette.types import ASGIApp

from monitor.api.auth import TOKEN_ENV
from monitor.api.exceptions import ApiConfigError

log = logging.getLogger(__name__)

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (IPv6 in brackets) as ``(host, port)``; port 0 picks a free one.

    >>> parse_listen("127.0.0.1:8080"), parse_listen("[::1]:9"), parse_listen("0.0.0.0:0")
    (('127.0.0.1', 8080), ('::1', 9), ('0.0.0.0', 0))
    """
    text = value.strip()
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


def require_token(host: str, token: str | None) -> None:
    """Refuse to expose the API beyond this machine without a token."""
    if not token and not is_loopback(host):
        raise ApiConfigError(
            f"refusing to serve the HTTP API on {host} without a token: set {TOKEN_ENV} "
            "(clients send 'Authorization: Bearer <token>'), or listen on 127.0.0.1")


def _listen(host: str, port: int, backlog: int = 2048) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ApiConfigError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(backlog)
    except OSError as e:
        sock.close()
        raise ApiConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


class _Server(uvicorn.Server):
    """Tells :meth:`ApiServer.start` when startup is over, successful or not."""

    def __init__(self, config: uvicorn.Config, done: threading.Event) -> None:
        super().__init__(config)
        self._done = done

    async def startup(self, sockets: Sequence[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets=list(sockets) if sockets is not None else None)
        finally:
            self._done.set()


class ApiServer:
    """uvicorn serving ``app`` on ``host:port`` from a background thread.

    ``start()`` binds in the caller's thread (so a taken port fails there, and port 0 is
    resolved: ``.port``) and returns once uvicorn accepts connections; ``stop()`` lets
    in-flight requests finish (up to a few seconds) and joins the thread.
    """

    def __init__(self, app: ASGIApp, host: str, port: int, *, access_log: bool = False) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.access_log = access_log
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("ApiServer already started")
        sock = _listen(self.host, self.port)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app, lifespan="off", access_log=self.access_log, timeout_graceful_shutdown=5,
            log_config=None,  # the process's logging stays as it is; uvicorn's logs propagate
        )
        done = threading.Event()
        self._server = _Server(config, done)
        self._thread = threading.Thread(target=self._run, args=(sock,), name="specwatch-api",
                                        daemon=True)
        self._thread.start()
        if not done.wait(START_TIMEOUT_S) or not self._server.started:
            self.stop()
            raise ApiConfigError(f"the HTTP API did not start on {self.url}")
        log.info("HTTP API listening on %s", self.url)

    def _run(self, sock: socket.socket) -> None:
        assert self._server is not None
        try:
            self._server.run(sockets=[sock])
        except BaseException:  # noqa: B036 - a dying thread must say why, and not take the process
            log.exception("HTTP API server stopped with an error")
        finally:
            sock.close()

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.should_exit = True
        thread.join(STOP_TIMEOUT_S)
        if thread.is_alive():
            server.force_exit = True
            thread.join(STOP_TIMEOUT_S)
        self._server = self._thread = None
        log.info("HTTP API on %s stopped", self.url)
