"""uvicorn on a socket bound up front, in the foreground or from a background thread: what the
HTTP API (:mod:`monitor.api.server`) and the proxy (:mod:`monitor.proxy.server`) share.

Binding in the caller's thread makes a taken port fail there, before anything runs, and
resolves port 0 (``.port``). A subclass says how uvicorn is configured (:meth:`_config`).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence

import anyio.to_thread
import uvicorn

from monitor.exceptions import ConfigError, SpecwatchError

__all__ = ["ThreadedServer", "listen"]

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0


def listen(host: str, port: int, error: type[SpecwatchError] = ConfigError,
           backlog: int = 2048) -> socket.socket:
    """A listening TCP socket on ``host:port``; ``error`` (with the reason) when it cannot be."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise error(f"cannot listen on {host}:{port}: {e.strerror}") from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(backlog)
    except OSError as e:
        sock.close()
        raise error(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


class _Server(uvicorn.Server):
    """Tells :meth:`ThreadedServer.start` when startup is over, successful or not."""

    def __init__(self, config: uvicorn.Config, done: threading.Event,
                 worker_threads: int | None = None) -> None:
        super().__init__(config)
        self._done = done
        self._worker_threads = worker_threads

    async def startup(self, sockets: Sequence[socket.socket] | None = None) -> None:
        try:
            if self._worker_threads is not None:
                # This loop's pool for sync endpoints (anyio's default: 40 threads).
                limiter = anyio.to_thread.current_default_thread_limiter()
                limiter.total_tokens = self._worker_threads
            await super().startup(sockets=list(sockets) if sockets is not None else None)
        finally:
            self._done.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn re-raises the signal once it has shut down, which would end the process
        # before the caller flushes its telemetry; a signal here means "stop serving". Off the
        # main thread (the API beside the daemon) signals stay with the main thread.
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


class ThreadedServer(ABC):
    """uvicorn serving on ``host:port`` (port 0: a free one, see ``port`` after binding).

    ``label`` names the server in errors ("the {label} did not start on ..."), ``thread_name``
    its background thread, ``error`` the exception a bad address or a failed start raises.
    """

    label = "server"
    thread_name = "specwatch-http"
    error: type[SpecwatchError] = ConfigError
    # Threads for sync endpoints at once (None: anyio's default of 40); the rest wait.
    worker_threads: int | None = None

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._sock: socket.socket | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @abstractmethod
    def _config(self) -> uvicorn.Config:
        """The uvicorn settings of this server (its app, parser, headers, logging)."""

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread is not None

    def bind(self) -> None:
        if self._sock is None:
            self._sock = listen(self.host, self.port, self.error)
            self.port = self._sock.getsockname()[1]

    def serve(self) -> None:
        """Serve in this thread until SIGINT/SIGTERM (main thread), then return."""
        self.bind()
        assert self._sock is not None
        try:
            _Server(self._config(), threading.Event(), self.worker_threads).run(
                sockets=[self._sock])
        finally:
            self._sock.close()
            self._sock = None

    def start(self) -> None:
        """Serve from a background thread; returns once connections are accepted."""
        if self._thread is not None:
            raise RuntimeError(f"{type(self).__name__} already started")
        self.bind()
        done = threading.Event()
        server = self._server = _Server(self._config(), done, self.worker_threads)
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()
        if not done.wait(START_TIMEOUT_S) or not server.started:
            self.stop()
            raise self.error(f"the {self.label} did not start on {self.url}")

    def _run(self) -> None:
        assert self._server is not None and self._sock is not None
        sock = self._sock
        try:
            self._server.run(sockets=[sock])
        except BaseException:  # noqa: B036 - a dying thread must say why, and not take the process
            # under the subclass's module, where its other messages go
            logging.getLogger(type(self).__module__).exception(
                "%s server stopped with an error", self.label)
        finally:
            sock.close()

    def stop(self) -> None:
        """Let in-flight requests finish (up to a few seconds) and join the thread."""
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
