"""The soak benchmark's view of a daemon: a ``specwatch run`` subprocess measured from outside.

The daemon runs alone in its process so that its resident memory and CPU time (read from
``/proc``) are its own, not the load generator's. Its store is read through a separate
read-only engine, the way an operator's report would, and its ``/metrics`` over HTTP.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, func, select
from sqlalchemy.engine import Engine, make_url

from monitor.broker import free_port
from monitor.store.db import READ_ONLY, make_engine, normalize_url, upgrade
from monitor.store.tables import (
    alerts_table,
    outbox_table,
    partitions_table,
    rollups_table,
    series_table,
    state_table,
)

REPO = Path(__file__).resolve().parents[1]
PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")
PR_SET_PDEATHSIG = 1


# Set by SIGINT/SIGTERM in the benchmark: every wait checks it, so a stop request ends the
# run within a second instead of surfacing as a KeyboardInterrupt inside a Kafka client.
STOP = threading.Event()


class DaemonDied(RuntimeError):
    """The daemon under test exited on its own; the message holds the end of its log."""


class Interrupted(Exception):
    """The benchmark was asked to stop (Ctrl-C, SIGTERM)."""


def pause(seconds: float) -> None:
    """Sleep, unless asked to stop: then raise :class:`Interrupted`."""
    if STOP.wait(max(0.0, seconds)):
        raise Interrupted


# -- /proc -------------------------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM (peak RSS) and the other ``kB`` lines of /proc/<pid>/status, in bytes."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            name, _, rest = line.partition(":")
            parts = rest.split()
            if len(parts) == 2 and parts[1] == "kB":
                out[name] = int(parts[0]) * 1024
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the process (all threads), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        # The command name (field 2) may hold spaces; fields after it are plain numbers.
        fields = fh.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14, 15)


# -- databases ---------------------------------------------------------------------------------


@contextmanager
def fresh_database(server_url: str | None, workdir: Path, name: str,
                   keep: bool = False) -> Iterator[str]:
    """A migrated, empty database: a SQLite file in ``workdir``, or a new database on the
    PostgreSQL server of ``server_url`` (dropped afterwards unless ``keep``).

    The exact end-of-run check compares every rollup in the store with what was produced,
    so each run needs a database of its own.
    """
    if not server_url:
        url = f"sqlite:///{workdir / name}.db"
        upgrade(url)
        yield url
        return
    base = make_url(normalize_url(server_url))
    if base.get_backend_name() != "postgresql":
        raise SystemExit("--db-url takes a PostgreSQL server URL (SQLite is the default)")
    db = f"specwatch_soak_{name.replace('-', '_')}_{secrets.token_hex(4)}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT",
                          connect_args={"connect_timeout": 10})
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{db}"')
        url = base.set(database=db).render_as_string(hide_password=False)
        try:
            upgrade(url)
            yield url
        finally:
            if not keep:
                with admin.connect() as conn:
                    conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    finally:
        admin.dispose()


class StoreProbe:
    """Cheap read-only queries on the daemon's store, safe to run while it checkpoints.

    (``Store.load_partitions`` would also decode every dedup log: at thousands of events a
    second that is a million request ids per sample, so offsets are read on their own.)
    """

    def __init__(self, url: str, source: str) -> None:
        self._engine: Engine = make_engine(url)
        self._reader = self._engine.execution_options(**{READ_ONLY: True})
        self.url = url
        self.source = source

    def next_offsets(self) -> dict[int, int]:
        c = partitions_table.c
        with self._reader.connect() as conn:
            rows = conn.execute(select(c.partition, c.next_offset).where(c.source == self.source))
            return {int(p): int(o or 0) for p, o in rows}

    def committed_events(self) -> int:
        """Requests counted in committed minute rollups: every event checkpointed so far."""
        c = rollups_table.c
        with self._reader.connect() as conn:
            value = conn.execute(
                select(func.coalesce(func.sum(c.requests), 0)).where(c.granularity == "minute")
            ).scalar_one()
        return int(value)

    def alerts_fired(self) -> int:
        """Alert records that went to ``firing`` (each a decided episode start or re-fire)."""
        c = alerts_table.c
        with self._reader.connect() as conn:
            return int(conn.execute(
                select(func.count()).select_from(alerts_table).where(c.state == "firing")
            ).scalar_one())

    def pending_notifications(self) -> int:
        c = outbox_table.c
        with self._reader.connect() as conn:
            return int(conn.execute(
                select(func.count()).select_from(outbox_table).where(c.state == "pending")
            ).scalar_one())

    def series_count(self) -> int:
        with self._reader.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(series_table)).scalar_one())

    def state_bytes(self) -> tuple[int, int]:
        """(snapshots, bytes of their JSON) of the detector state the daemon persisted."""
        c = state_table.c
        n = size = 0
        with self._reader.connect() as conn:
            for (data,) in conn.execute(select(c.data).where(c.source == self.source)):
                n += 1
                size += len(orjson.dumps(data))
        return n, size

    def close(self) -> None:
        self._engine.dispose()


# -- the daemon --------------------------------------------------------------------------------


def write_config(path: Path, sections: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(sections, sort_keys=False), encoding="utf-8")
    return path


def daemon_env(extra: dict[str, str]) -> dict[str, str]:
    """This environment without any SPECWATCH_* setting (a stray SPECWATCH_DB_URL would
    point the daemon at another database), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECWATCH_")}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


# Loaded here, not in the child: a dlopen between fork and exec could wait forever on a
# loader lock that another thread of this process held at the fork.
_LIBC = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the benchmark dies, even by SIGKILL (Linux
    PR_SET_PDEATHSIG), so that no daemon outlives a killed soak."""
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Daemon:
    """``python -m monitor run --config CONFIG --http 127.0.0.1:PORT`` in its own session.

    Its own session: a Ctrl-C in the terminal reaches the benchmark only, which then stops
    the daemon with SIGTERM and checks that it exits cleanly. Output goes to ``log``.
    """

    def __init__(self, config: Path, log: Path, env: dict[str, str]) -> None:
        self.config = config
        self.log = log
        self.env = env
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.returncode: int | None = None
        self._http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=10.0)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 120.0) -> Daemon:
        """Start it and wait until ``/readyz`` says partitions are assigned."""
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "monitor", "run", "--config", str(self.config),
                 "--http", f"127.0.0.1:{self.port}"],
                cwd=REPO, env=self.env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent,
            )
        self.wait(self.ready, timeout, "the daemon to be ready (/readyz)")
        return self

    def ready(self) -> bool:
        try:
            return self._http.get("/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    def check(self) -> None:
        """Raise :class:`DaemonDied` if the process has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            self.returncode = self.proc.returncode
            raise DaemonDied(f"the daemon exited with code {self.proc.returncode}; end of its "
                             f"log ({self.log}):\n{self.log_tail()}")

    def wait(self, condition: Any, timeout: float, what: str, interval: float = 0.25) -> None:
        """Poll ``condition()`` until true; fail if the daemon dies or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while True:
            self.check()
            if condition():
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
            pause(interval)

    def memory(self) -> dict[str, int]:
        """``rss`` and ``peak`` resident bytes; ``anon`` (heap) and ``file`` (mapped files,
        SQLite's shared memory among them) are the parts of ``rss`` a step can come from."""
        status = proc_status(self.pid)
        return {"rss": status.get("VmRSS", 0), "peak": status.get("VmHWM", 0),
                "anon": status.get("RssAnon", 0),
                "file": status.get("RssFile", 0) + status.get("RssShmem", 0)}

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def metrics(self) -> dict[str, float]:
        """Every sample of ``/metrics`` summed over its labels, by sample name."""
        text = self._http.get("/metrics").text
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out[s.name] = out.get(s.name, 0.0) + float(s.value)
        return out

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_bytes()[-chars:].decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self, timeout: float | None = None) -> int | None:
        """SIGTERM (a final checkpoint, then exit 0), SIGKILL after ``timeout``; the exit code.

        The default timeout is 60 s, or 20 s when the run was interrupted: a terminal's
        Ctrl-C also stops the broker, and the daemon may then wait on it (a SIGKILL loses
        nothing: the next start resumes from the last checkpoint).
        """
        if timeout is None:
            timeout = 20.0 if STOP.is_set() else 60.0
        proc, self.proc = self.proc, None
        self._http.close()
        if proc is None:
            return self.returncode
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                self.returncode = None  # killed: no clean exit to report
                return None
        self.returncode = proc.returncode
        return self.returncode
