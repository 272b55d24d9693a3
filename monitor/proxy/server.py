"""uvicorn serving the proxy: in the foreground for ``specwatch proxy`` (SIGINT/SIGTERM stop
it gracefully), or from a background thread for tests and benchmarks.

uvicorn's own ``Server`` and ``Date`` response headers are off: the client gets the
upstream's headers, not the proxy's.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Iterator, Sequence

import uvicorn
from starlette.types import ASGIApp

from monitor.exceptions import ConfigError

__all__ = ["ProxyServer"]

log = logging.getLogger(__name__)

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0


def _bind(host: str, port: int, backlog: int = 2048) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(backlog)
    except OSError as e:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, done: threading.Event) -> None:
        super().__init__(config)
        self._done = done

    async def startup(self, sockets: Sequence[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets=list(sockets) if sockets is not None else None)
        finally:
            self._done.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn re-raises the signal once it has shut down, which would end the process
        # before the caller flushes its telemetry; a signal here means "stop serving".
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


class ProxyServer:
    """Serve ``app`` on ``host:port`` (port 0: a free one, see ``port`` after binding).

    The socket is bound in the constructor's caller (``bind()``), so a taken port fails
    there, before anything runs.
    """

    def __init__(self, app: ASGIApp, host: str, port: int, *, access_log: bool = False) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.access_log = access_log
        self._sock: socket.socket | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def bind(self) -> None:
        if self._sock is None:
            self._sock = _bind(self.host, self.port)
            self.port = self._sock.getsockname()[1]

    def _make(self) -> _Server:
        config = uvicorn.Config(
            self.app, lifespan="on", access_log=self.access_log, log_config=None,
            server_header=False, date_header=False, timeout_graceful_shutdown=5,
            http="httptools",  # C parser: the proxy's added latency (bench/proxy_latency.py)
        )
        self._server = _Server(config, self._started)
        return self._server

    def serve(self) -> None:
        """Serve in this thread until SIGINT/SIGTERM (main thread), then return."""
        self.bind()
        assert self._sock is not None
        try:
            self._make().run(sockets=[self._sock])
        finally:
            self._sock.close()
            self._sock = None

    def start(self) -> None:
        """Serve from a background thread; returns once connections are accepted."""
        if self._thread is not None:
            raise RuntimeError("ProxyServer already started")
        self.bind()
        server = self._make()
        self._thread = threading.Thread(target=self._run, name="specwatch-proxy", daemon=True)
        self._thread.start()
        if not self._started.wait(START_TIMEOUT_S) or not server.started:
            self.stop()
            raise ConfigError(f"the proxy did not start on {self.url}")

    def _run(self) -> None:
        assert self._server is not None and self._sock is not None
        try:
            self._server.run(sockets=[self._sock])
        except BaseException:  # noqa: B036 - a dying thread must say why, and not take the process
            log.exception("proxy server stopped with an error")
        finally:
            self._sock.close()

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
        self._sock = None

    def __enter__(self) -> ProxyServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
