"""uvicorn serving the proxy: in the foreground for ``specwatch proxy`` (SIGINT/SIGTERM stop
it gracefully), or from a background thread for tests and benchmarks.

uvicorn's own ``Server`` and ``Date`` response headers are off: the client gets the
upstream's headers, not the proxy's.
"""

from __future__ import annotations

import uvicorn
from starlette.types import ASGIApp

from monitor.httpserver import ThreadedServer

__all__ = ["ProxyServer"]


class ProxyServer(ThreadedServer):
    """Serve ``app`` on ``host:port`` (port 0: a free one, see ``port`` after binding).

    The socket is bound by ``bind()`` (or on starting), so a taken port fails there, before
    anything runs.
    """

    label = "proxy"
    thread_name = "specwatch-proxy"

    def __init__(self, app: ASGIApp, host: str, port: int, *, access_log: bool = False) -> None:
        super().__init__(host, port)
        self.app = app
        self.access_log = access_log

    def _config(self) -> uvicorn.Config:
        return uvicorn.Config(
            self.app, lifespan="on", access_log=self.access_log, log_config=None,
            server_header=False, date_header=False, timeout_graceful_shutdown=5,
            http="httptools",  # C parser: the proxy's added latency (bench/proxy_latency.py)
        )

    def __enter__(self) -> ProxyServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
