"""`specwatch ratios` on a large store: a route's hourly table among 10,000 series x 30 days.

Fills a fresh, migrated store (SQLite by default, or ``--db``) with ``--series`` series
spread over ``--routes`` routes (40 series a route at the defaults), and for each an hour
row for every hour of ``--days`` days plus the day rows (7.2 million hour rows at the
defaults): one hour of rows is written
through the store's own table, and every other hour is copied from it inside the database,
so the fill is fast. The rows carry real sketches (a simulated hour of one series). Minute
rows are left out: the rollups' primary key leads with the granularity, so they sit in
another part of the index and a query of hours never reads them.

Then, timed (median of ``--repeat`` runs, each on a new connection):

- ``Store.ratios(granularity="hour", route=...)``: what `specwatch ratios` and
  ``/api/v1/ratios`` call, for the whole 30 days and for the last day;
- what `specwatch ratios --route R --granularity hour` does for its default (narrow) table:
  the same rows, the bucket sketches for the TTFT quantiles beside them, and the text;
- ``GET /api/v1/ratios`` of that route's 30 days of hours (JSON), served as the daemon serves
  it, with curl as the client;
- the command itself, ``python -m monitor ratios --route R --granularity hour``, as a
  process end to end (start-up and imports included: what a user waits for), its CPU
  seconds from ``os.wait4``; with ``--against TREE``, another checkout's in the same run,
  the runs alternating;
- the database's plan for the query (it must search by index, not scan the table).

    PYTHONPATH=. python bench/ratios.py                     # 10,000 series, 30 days, SQLite
    PYTHONPATH=. python bench/ratios.py --db postgresql+psycopg://postgres@127.0.0.1:5432/test
    cp bench/ratios.py ../old/bench/ && (cd ../old && python bench/ratios.py)   # an older tree
    PYTHONPATH=. python bench/ratios.py --keep /tmp/r.db --process-repeat 25 --against ../old
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode

from sqlalchemy import bindparam, create_engine, event, insert, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.aggregate.bucket import BucketStats  # noqa: E402
from monitor.aggregate.series import SeriesKey  # noqa: E402
from monitor.simulate import Simulator, scenario_config  # noqa: E402
from monitor.store.db import make_engine, upgrade  # noqa: E402
from monitor.store.query import NARROW_COLUMNS, format_ratios  # noqa: E402
from monitor.store.series_ids import series_key_hash  # noqa: E402
from monitor.store.store import Store  # noqa: E402
from monitor.store.tables import rollups_table, series_table  # noqa: E402
from monitor.telemetry.parse import event_from_obj  # noqa: E402

START = datetime(2026, 11, 1, tzinfo=UTC)


def sample_hour() -> BucketStats:
    """One series' hour of simulated traffic (about 100 requests): the sketches a real row
    carries."""
    cfg = scenario_config("quiet", duration_s=3600.0, rate=0.1, seed=3)
    stats = BucketStats()
    for raw in Simulator(cfg).events():
        if raw["route"] == "chat":
            stats.update(event_from_obj(raw))
    return stats


def fill(url: str, n_series: int, n_routes: int, days: int) -> tuple[str, int]:
    """Write the store; returns a route's name and its series count."""
    row = sample_hour().to_row()
    engine = make_engine(url)
    if engine.dialect.name == "sqlite":
        @event.listens_for(engine, "connect")
        def _fast(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            # a bench's own fill: no crash to survive it
            dbapi_conn.execute("PRAGMA journal_mode=MEMORY")
            dbapi_conn.execute("PRAGMA synchronous=OFF")
    now = START
    series = []
    for i in range(n_series):
        key = SeriesKey(f"route-{i % n_routes:04d}", "llama-3.1-70b-instruct", "2026-10-28",
                        "llama3", "llama-3.2-1b", f"2026-10-30+p{i // n_routes:04d}", "llama3",
                        "draft_model", 4)
        series.append({"id": i + 1, "key_hash": series_key_hash(key), **key._asdict(),
                       "first_seen_at": now, "last_seen_at": now})
    hours = days * 24
    with engine.begin() as conn:
        conn.execute(insert(series_table), series)
        conn.execute(insert(rollups_table), [
            {"granularity": "hour", "series_id": s["id"], "bucket_start": START, **row}
            for s in series])
        cols = [c.name for c in rollups_table.c if c.name not in ("granularity", "bucket_start")]
        listed = ", ".join(cols)
        postgres = conn.dialect.name == "postgresql"
        for gran, step, count in (("hour", 1, hours), ("day", 24, days)):
            for k in range(1 if gran == "hour" else 0, count):
                offset = k * step
                if postgres:
                    start = f"bucket_start + interval '{offset} hours'"
                else:
                    start = (f"strftime('%Y-%m-%d %H:%M:%S', bucket_start, '+{offset} hours')"
                             " || '.000000'")
                conn.execute(text(
                    f"INSERT INTO rollups (granularity, bucket_start, {listed}) "
                    f"SELECT '{gran}', {start}, {listed} FROM rollups "
                    "WHERE granularity = 'hour' AND bucket_start = :start"
                ).bindparams(bindparam("start", START, type_=rollups_table.c.bucket_start.type)))
        if postgres:
            conn.execute(text("ANALYZE"))
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            conn.execute(text("ANALYZE"))
    engine.dispose()
    return f"route-{min(7, n_routes - 1):04d}", -(-n_series // n_routes)


def plan(url: str, route: str, since: datetime) -> list[str]:
    """The database's plan for one of the route's series' hour rows (``ratios`` runs it once
    per series of the route)."""
    from sqlalchemy import select

    from monitor.store.query import per_series_statement

    r = rollups_table.c
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            sid = conn.execute(select(series_table.c.id)
                               .where(series_table.c.route == route).limit(1)).scalar_one()
            stmt = per_series_statement([r.requests], "hour", since, None).params(sid=sid)
            compiled = stmt.compile(conn, compile_kwargs={"literal_binds": True})
            prefix = "EXPLAIN QUERY PLAN " if conn.dialect.name == "sqlite" else "EXPLAIN "
            return [" ".join(str(v) for v in row)
                    for row in conn.exec_driver_sql(prefix + str(compiled))]
    finally:
        engine.dispose()


def timed(url: str, route: str, since: datetime, repeat: int, *,
          formatted: bool) -> tuple[float, float, int]:
    """Median wall and CPU seconds of ``repeat`` reads, and the rows read. CPU is the figure
    to trust on a shared machine: a busy neighbour stretches wall time, not CPU."""
    times, cpu, rows = [], [], 0
    for _ in range(repeat):
        store = Store(url)
        started, cpu_started = time.perf_counter(), time.process_time()
        span = {"granularity": "hour", "route": route, "since": since}
        if formatted:  # what `specwatch ratios --route` does for its default table
            if hasattr(store, "ratio_table"):
                from monitor.store import query

                fields = getattr(query, "fields_for", None)  # the counters the table shows
                out, latency = store.ratio_table(
                    query.sketches_for(NARROW_COLUMNS), **span,
                    **({"fields": fields(NARROW_COLUMNS)} if fields else {}))
            else:  # an older tree (this file copied into it): its two reads
                out, latency = store.ratios(**span), store.buckets(**span)
            format_ratios(out, "table", columns=NARROW_COLUMNS, latency=latency)
        else:
            out = store.ratios(**span)
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
        rows = len(out)
        store.close()
    return statistics.median(times), statistics.median(cpu), rows


def api_request(url: str, route: str, since: datetime, repeat: int) -> tuple[float, int]:
    """Median wall seconds of ``GET /api/v1/ratios?route=R&granularity=hour&since=...``
    (JSON), from request to the last byte, against the API served by this process (as the
    daemon serves it: uvicorn in a thread, a store opened once) with curl as the client; and
    the response's bytes."""
    from monitor.api.app import create_app
    from monitor.api.server import ApiServer

    store = Store(url)
    server = ApiServer(create_app(store), "127.0.0.1", 0)
    server.start()
    query = urlencode({"route": route, "granularity": "hour",
                       "since": since.isoformat().replace("+00:00", "Z")})
    times, size = [], 0
    try:
        for _ in range(repeat):
            out = subprocess.run(
                ["curl", "-sS", "--fail", "-o", os.devnull, "-w", "%{time_total} %{size_download}",
                 f"{server.url}/api/v1/ratios?{query}"],
                capture_output=True, text=True, check=True).stdout.split()
            times.append(float(out[0]))
            size = int(out[1])
    finally:
        server.stop()
        store.close()
    return statistics.median(times), size


def cli_process(url: str, route: str, since: datetime, repeat: int,
                trees: Sequence[Path] = ()) -> dict[Path, tuple[list[float], list[float]]]:
    """Wall and CPU seconds of ``repeat`` runs of the `specwatch ratios --route` process of
    this tree and of each of ``trees`` (other checkouts: before and after in one run), the
    runs alternating between the trees so that a slow phase of the machine falls on all
    of them, after one unmeasured run each. Each tree's modules are byte-compiled first, as
    ``pip install`` leaves an installed package: a checkout run under
    ``PYTHONDONTWRITEBYTECODE=1`` (as on this project's machines) would otherwise compile
    them from source at every start, about 0.05 s of each run."""
    roots = [Path(__file__).resolve().parents[1], *(Path(t).resolve() for t in trees)]
    for root in roots:
        for package in ("monitor", "alerts"):
            compileall.compile_dir(root / package, quiet=1)
    cmd = [sys.executable, "-m", "monitor", "ratios", "--route", route, "--granularity",
           "hour", "--db", url, "--since", since.isoformat()]
    runs: dict[Path, tuple[list[float], list[float]]] = {root: ([], []) for root in roots}
    for i in range(repeat + 1):
        for root in roots:
            env = {**os.environ, "PYTHONPATH": str(root)}
            started = time.perf_counter()
            proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL)
            _, status, usage = os.wait4(proc.pid, 0)
            if status != 0:
                raise RuntimeError(f"{' '.join(cmd)} in {root} exited with status {status}")
            if i:
                runs[root][0].append(time.perf_counter() - started)
                runs[root][1].append(usage.ru_utime + usage.ru_stime)
    return runs


def _spread(values: list[float]) -> str:
    """Median and quartiles."""
    q1, median, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return f"{median:.3f} s (quartiles {q1:.3f}-{q3:.3f})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--series", type=int, default=10_000)
    p.add_argument("--routes", type=int, default=250)
    p.add_argument("--days", type=int, default=30)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--db", default=None, help="a PostgreSQL server URL: a new database there "
                   "is made and dropped (default: a SQLite file in a temporary directory)")
    p.add_argument("--against", type=Path, nargs="*", default=[], metavar="TREE",
                   help="other checkouts whose `specwatch ratios` process is timed in the same "
                   "run, alternating with this tree's")
    p.add_argument("--process-repeat", type=int, default=None, metavar="N",
                   help="runs of the process per tree (default: --repeat)")
    p.add_argument("--keep", default=None, metavar="NAME",
                   help="keep the filled store for the next run and reuse it when it is there "
                   "(the fill takes minutes): database NAME on --db's server, or the SQLite "
                   "file NAME; it must have been filled with the same sizes")
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        admin = None
        reuse = False
        if args.db:
            name = args.keep or f"bench_ratios_{uuid.uuid4().hex[:8]}"
            admin = create_engine(args.db, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                reuse = conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"),
                                     {"n": name}).first() is not None
                if not reuse:
                    conn.execute(text(f'CREATE DATABASE "{name}"'))
            url = args.db.rsplit("/", 1)[0] + "/" + name
        else:
            path = Path(args.keep) if args.keep else Path(tmp) / "ratios.db"
            reuse = path.exists()
            url = f"sqlite:///{path}"
        try:
            upgrade(url)
            started = time.perf_counter()
            if reuse and args.keep:
                route = f"route-{min(7, args.routes - 1):04d}"
                per_route = -(-args.series // args.routes)
            else:
                route, per_route = fill(url, args.series, args.routes, args.days)
            hours = args.days * 24
            print(f"store: {url.split('@')[-1]}; {args.series:,} series over {args.routes} "
                  f"routes, {args.series * hours:,} hour rows and {args.series * args.days:,} "
                  f"day rows; filled in {time.perf_counter() - started:.1f} s")
            end = START + timedelta(hours=hours)
            spans = ((f"{args.days} days", START), ("last day", end - timedelta(days=1)))
            for label, since in spans:
                for formatted in (False, True):
                    secs, cpu, rows = timed(url, route, since, args.repeat,
                                            formatted=formatted)
                    what = "the CLI's table" if formatted else "Store.ratios"
                    print(f"{route} ({per_route} series), hourly, {label}: {rows:,} rows, "
                          f"{what}: {secs:.3f} s, CPU {cpu:.3f} s (medians of {args.repeat})")
            secs, size = api_request(url, route, START, args.repeat)
            print(f"{route}, hourly, {args.days} days, GET /api/v1/ratios (JSON, {size:,} "
                  f"bytes): {secs:.3f} s (median of {args.repeat})")
            runs = cli_process(url, route, START, args.process_repeat or args.repeat,
                               args.against)
            for root, (secs, cpu) in runs.items():
                print(f"{route}, hourly, {args.days} days, `specwatch ratios --route` as a "
                      f"process{'' if len(runs) == 1 else f' ({root})'}: {_spread(secs)}, CPU "
                      f"{_spread(cpu)} ({len(secs)} runs)")
            print("plan:")
            for line in plan(url, route, START):
                print(f"  {line}")
        finally:
            if admin is not None:
                if not args.keep:
                    with admin.connect() as conn:
                        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                admin.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
