"""Security properties, each proved by a test that fails when the property breaks
(``docs/security.md`` says what is promised): loopback by default, the bearer token on every
route but the probes, constant-time comparison, secrets redacted everywhere, no SQL built
from strings, and no internals in error answers.

Secrets are *sentinels*: strings that occur nowhere else, so finding one anywhere in captured
output (logs at every level, stdout and stderr of real processes, HTTP answers, database rows,
the metrics exposition, reprs) is a leak.
"""

from __future__ import annotations

import base64
import logging
import subprocess
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.monitor.api import TestClient

__all__ = [
    "DB_PASSWORD", "TestClient", "all_logs", "assert_no_secret", "listening_addresses",
    "specwatch", "variants",
]

# Distinct, greppable, and shaped like the real thing (a password, an API token).
DB_PASSWORD = "dbPW-sentinel-5f3c9a1e"
API_TOKEN = "apiTOKEN-sentinel-8d2e47b0c1"

ROOT = Path(__file__).resolve().parents[2]

# Everything that logs in this process, turned up to its most verbose, pins and all:
# a pin that a config or a debugging engineer can undo proves nothing.
VERBOSE_LOGGERS = ("", "httpx", "httpcore", "httpcore.connection", "httpcore.http11",
                   "httpcore.proxy", "kafka", "sqlalchemy", "sqlalchemy.engine",
                   "sqlalchemy.pool", "alembic", "uvicorn", "uvicorn.error", "uvicorn.access",
                   "alerts", "monitor", "specwatch")


def variants(secret: str) -> list[str]:
    """The forms a secret can leak in: as is, URL-encoded, Base64 (Basic auth, JSON bytes)."""
    from urllib.parse import quote

    return sorted({secret, quote(secret, safe=""), base64.b64encode(secret.encode()).decode()})


def assert_no_secret(texts: Iterable[str | bytes], secrets: Sequence[str],
                     where: str = "output") -> None:
    """Fail naming the secret and the first line holding it, without a wall of text."""
    for text in texts:
        s = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        for secret in secrets:
            for form in variants(secret):
                if form in s:
                    line = next(x for x in s.splitlines() if form in x)
                    raise AssertionError(f"{secret!r} leaked into {where}: {line[:300]!r}")


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=1)
        self.records: list[logging.LogRecord] = []
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        # The formatted line, traceback included: exc_info is where a URL would hide.
        self.lines.append(self.format(record))


@contextmanager
def all_logs() -> Iterator[_Collect]:
    """Every record of every logger at every level (TRACE included) while the block runs,
    formatted with tracebacks; levels and the root handler restored afterwards."""
    handler = _Collect()
    root = logging.getLogger()
    saved = {name: logging.getLogger(name).level for name in VERBOSE_LOGGERS}
    root.addHandler(handler)
    for name in VERBOSE_LOGGERS:
        logging.getLogger(name).setLevel(1)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def specwatch(args: Sequence[str], *, env: dict[str, str], timeout: float = 60,
              ) -> subprocess.CompletedProcess[str]:
    """``specwatch ARGS`` as a real process (``python -m monitor``), output captured."""
    return subprocess.run([sys.executable, "-m", "monitor", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def listening_addresses(port: int) -> set[str]:
    """The local addresses with a socket listening on TCP ``port``, read from the kernel's
    tables (no traffic sent anywhere): ``{"127.0.0.1"}``, ``{"::1"}``, ``{"0.0.0.0"}``..."""
    import ipaddress

    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state = fields[1], fields[3]
            addr_hex, port_hex = local.split(":")
            if state != "0A" or int(port_hex, 16) != port:  # 0A: LISTEN
                continue
            # The kernel prints each 32-bit word in host (little-endian) order.
            raw = b"".join(bytes.fromhex(addr_hex[i:i + 8])[::-1] for i in range(0, width, 8))
            found.add(str(ipaddress.ip_address(raw)))
    return found
