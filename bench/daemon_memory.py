"""Where the daemon's memory per series goes: traced allocations, by file and line, per series.

`bench/soak.py --skip-soak --series N` measures the daemon's resident memory per series
(RSS at N series minus RSS on the same events over the five default series). This runs the
same traffic through the same :class:`~monitor.app.Application` (the bundled broker, a fresh
SQLite store, the soak's configuration) in a child process per run, under ``tracemalloc``
(one frame: the line that allocated), and prints what is live once everything is
checkpointed: the difference between the N-series run and the 5-series run, per series, by
file and by line. It tells which part of the daemon holds a series' bytes, where RSS alone
cannot.

    PYTHONPATH=. python bench/daemon_memory.py                     # 10,000 series
    PYTHONPATH=. python bench/daemon_memory.py --series 2000 --top 30
    PYTHONPATH=. python bench/daemon_memory.py --pairs 1 --tree ../base   # one pair a route
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

KB = 1024.0


def _resident_kb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return float(line.split()[1])
    return float("nan")


def _mappings_kb() -> dict[str, float]:
    """Resident memory by kind of mapping: the C heap (brk), anonymous mappings (pymalloc's
    arenas, glibc's thread arenas, numpy's large buffers) and files (code, libraries)."""
    out = {"heap": 0.0, "anonymous": 0.0, "file": 0.0}
    kind = "file"
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if line[0] in "0123456789abcdef" and "-" in head[0]:
                name = head[5] if len(head) > 5 else ""
                kind = "heap" if name == "[heap]" else "anonymous" if not name else "file"
                if name.startswith("["):
                    kind = "heap" if name == "[heap]" else "file"
            elif head[0] == "Rss:":
                out[kind] += float(head[1])
    return out


def one_run(bootstrap: str, series: int, total: int, pairs: int, seed: int,
            trace: bool) -> dict[str, Any]:
    """In this process: produce the traffic, consume it all with the daemon's Application,
    checkpoint, and return the live traced bytes by line (``trace``) or resident memory by
    kind and pymalloc's use of its arenas (not ``trace``: tracemalloc's own tables would be
    counted)."""
    from prometheus_client import CollectorRegistry
    from replay_checkpoints import pymalloc_mb
    from soak_traffic import MESSAGE_BATCH, SeriesSpreader, recent_events

    from monitor import heap
    from monitor.app import Application
    from monitor.config import Config
    from monitor.simulate import KafkaWriter
    from monitor.sources.topics import ensure_topics
    from monitor.store.db import upgrade

    name = uuid.uuid4().hex[:8]
    topic = f"memory-{name}"
    ensure_topics(bootstrap, [topic, f"{topic}-dlq"], 4)
    events = recent_events(total, seed)
    if series > 5:
        events = map(SeriesSpreader(series, pairs), events)
    with KafkaWriter(bootstrap, topic, batch_size=MESSAGE_BATCH, partitions=4,
                     max_delay_s=None) as writer:
        writer.write_all(events)
        messages = writer.messages
    db = f"sqlite:///{tempfile.mkdtemp(prefix='specwatch-memory-')}/store.db"
    upgrade(db)
    # bench/soak.py's series configuration: every series admitted, nothing judged stale
    config = Config.model_validate({
        "kafka": {"bootstrap_servers": bootstrap, "topic": topic,
                  "dead_letter_topic": f"{topic}-dlq", "group_id": f"memory-{name}",
                  "partitions": 4, "session_timeout_ms": 6000, "max_poll_interval_ms": 300000},
        "store": {"url": db},
        "ingest": {"allowed_lateness": "1h", "dedup_horizon": "1h",
                   "max_series_per_route": max(256, pairs),
                   "max_series": max(20000, series + 1000)},
        "detection": {"stale_after": "1d", "idle_pair_resolve": "1d"},
    })
    if trace:
        tracemalloc.start(1)
    app = Application(config, registry=CollectorRegistry())
    heap.settle()
    pipeline, source = app.pipeline, app.source
    while pipeline.summary.messages < messages:
        source.poll_once(timeout_ms=500)
    source.checkpoint()
    gc.collect()
    heap.release()
    if not trace:
        row = {"series": series, "events": pipeline.summary.events, "rss_kb": _resident_kb(),
               "mappings_kb": _mappings_kb(), "pymalloc_mb": pymalloc_mb()}
        app.close()
        return row
    snapshot = tracemalloc.take_snapshot()
    traced = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    by_line: Counter[str] = Counter()
    for stat in snapshot.statistics("lineno"):
        frame = stat.traceback[0]
        by_line[f"{_short(frame.filename)}:{frame.lineno}"] += stat.size
    row = {"series": series, "events": pipeline.summary.events, "traced": traced,
           "by_line": dict(by_line)}
    app.close()
    return row


def _short(filename: str) -> str:
    for marker in ("/site-packages/", "/lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    parts = Path(filename).parts
    return "/".join(parts[parts.index("monitor"):]) if "monitor" in parts else filename


def _child(args: argparse.Namespace, bootstrap: str, series: int, trace: bool) -> dict[str, Any]:
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    env = dict(os.environ, PYTHONPATH=f"{args.tree.resolve()}:{HERE}")
    subprocess.run([sys.executable, __file__, "--one", str(series), "--bootstrap", bootstrap,
                    "--out", str(out), "--total", str(args.series * args.events_per_series),
                    "--pairs", str(args.pairs), "--seed", str(args.seed)]
                   + ([] if trace else ["--no-trace"]), env=env, check=True)
    row: dict[str, Any] = json.loads(out.read_text())
    out.unlink()
    return row


def _line(label: str, base: float, many: float, extra: int) -> None:
    print(f"{label:>26} {base / 2**20:>9,.1f} MB {many / 2**20:>11,.1f} MB "
          f"{(many - base) / extra:>9,.0f} B")


def _table(title: str, diff: Counter[str], extra: int, top: int) -> None:
    print(f"\n{title}")
    print(f"{'bytes/series':>12}  where")
    for where, size in diff.most_common(top):
        print(f"{size / extra:>12,.0f}  {where}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--series", type=int, default=10_000)
    p.add_argument("--events-per-series", type=int, default=50)
    p.add_argument("--pairs", type=int, default=100, help="model pairs per route")
    p.add_argument("--tree", type=Path, default=HERE.parent,
                   help="the checkout whose monitor/ runs (default: this one)")
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--no-trace", action="store_true",
                   help="resident memory only (no tracemalloc run: a third of the time)")
    p.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--bootstrap", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--total", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one is not None:
        sys.path.insert(0, str(args.tree.resolve()))  # ahead of this checkout
        row = one_run(args.bootstrap, args.one, args.total, args.pairs, args.seed,
                      trace=not args.no_trace)
        args.out.write_text(json.dumps(row))
        return 0

    from monitor.broker import EmbeddedBroker

    started = time.perf_counter()
    with EmbeddedBroker() as broker:
        base = _child(args, broker.bootstrap_servers, 5, trace=False)
        many = _child(args, broker.bootstrap_servers, args.series, trace=False)
        traced = None if args.no_trace else (
            _child(args, broker.bootstrap_servers, 5, trace=True),
            _child(args, broker.bootstrap_servers, args.series, trace=True))
    extra = args.series - 5
    print(f"# bench/daemon_memory.py: {args.series:,} series x {args.events_per_series} events "
          f"({args.pairs} pairs a route) against the same events on the 5 default series; "
          f"tree {args.tree.resolve()}; "
          f"{time.perf_counter() - started:.0f} s")
    print(f"events counted: {base['events']:,} on 5 series, {many['events']:,} on "
          f"{args.series:,}")
    print(f"{'':>26} {'5 series':>12} {f'{args.series:,} series':>14} {'per series':>12}")
    _line("resident", base["rss_kb"] * KB, many["rss_kb"] * KB, extra)
    for kind in base["mappings_kb"]:
        _line(f"  {kind}", base["mappings_kb"][kind] * KB, many["mappings_kb"][kind] * KB, extra)
    if base["pymalloc_mb"] and many["pymalloc_mb"]:
        for part in base["pymalloc_mb"]:
            _line(f"pymalloc {part}", base["pymalloc_mb"][part] * 2**20,
                  many["pymalloc_mb"][part] * 2**20, extra)
    if traced is None:
        return 0
    tbase, tmany = traced
    _line("traced (live, own run)", tbase["traced"], tmany["traced"], extra)
    lines: Counter[str] = Counter()
    files: Counter[str] = Counter()
    for where in set(tbase["by_line"]) | set(tmany["by_line"]):
        d = tmany["by_line"].get(where, 0) - tbase["by_line"].get(where, 0)
        lines[where] += d
        files[where.rsplit(":", 1)[0]] += d
    _table("traced, by file", files, extra, args.top)
    _table("traced, by line", lines, extra, args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
