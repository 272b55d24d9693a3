"""The steps of one checkpoint transaction, in the order :meth:`Store.commit` runs them."""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy import Connection, delete, insert, select, update

from monitor.aggregate.bucket import BUCKET_ROWS, BucketStats, rows_of
from monitor.aggregate.series import SeriesKey
from monitor.alert_record import AlertRecord
from monitor.store.alerting import write_alerting
from monitor.store.bulk import dialect_statement, executemany
from monitor.store.changes import write_changes
from monitor.store.checkpoint import GRANULARITIES, Checkpoint, PartitionCommit
from monitor.store.exceptions import FencedError
from monitor.store.experiments import hour_of, write_experiments
from monitor.store.hourly import MERGE_BLOCK, merge_hourly, run_merged, update_statement
from monitor.store.series_ids import chunks, dialect_insert, resolve_series
from monitor.store.slices import write_slices
from monitor.store.tables import (
    alerts_table,
    dedup_table,
    partitions_table,
    rollups_table,
    state_table,
)

FoldedKey = tuple[str, SeriesKey, int]
SeriesRef = Any  # a series' id in the store, or its SeriesKey (fold)
Row = dict[str, Any]  # BucketStats.to_row() form


def utc(ts: int | float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def fence(
    conn: Connection, source: str, partitions: Sequence[PartitionCommit], now: datetime
) -> None:
    """Advance each partition's offset only where it still holds the expected value.

    Runs first: on PostgreSQL the row locks taken here serialise two consumers' checkpoints
    of one partition, so the loser fails here before touching anything else.
    """
    c = partitions_table.c
    for pc in sorted(partitions, key=lambda p: p.partition):
        values: dict[str, Any] = {"next_offset": pc.next_offset, "updated_at": now}
        if pc.max_event_ts is not None:
            values["max_event_ts"] = pc.max_event_ts
        if pc.expected_offset is None:
            stmt = (
                dialect_insert(conn, partitions_table)
                .values(source=source, partition=pc.partition, **values)
                .on_conflict_do_nothing(index_elements=["source", "partition"])
                .returning(c.partition)
            )
            if conn.execute(stmt).first() is None:
                raise FencedError(
                    f"partition {pc.partition} of source {source!r} already has a stored offset "
                    "while this consumer expected none: another consumer owns it"
                )
            continue
        where = (c.source == source, c.partition == pc.partition)
        stmt = update(partitions_table).where(*where, c.next_offset == pc.expected_offset)
        if conn.execute(stmt.values(**values)).rowcount != 1:
            stored = conn.execute(select(c.next_offset).where(*where)).scalar_one_or_none()
            raise FencedError(
                f"partition {pc.partition} of source {source!r}: stored next_offset is "
                f"{'absent' if stored is None else stored}, this consumer expected "
                f"{pc.expected_offset}: another consumer advanced it"
            )


def write_dedup(conn: Connection, source: str, partitions: Sequence[PartitionCommit]) -> None:
    rows = []
    for pc in partitions:
        if pc.new_ids:
            ts = [t for _, t in pc.new_ids]
            rows.append(
                {
                    "source": source,
                    "partition": pc.partition,
                    "min_ts": min(ts),
                    "max_ts": max(ts),
                    # Level 1: request ids compress about as well at any level, and this is
                    # on the checkpoint's critical path.
                    "ids": zlib.compress(orjson.dumps(pc.new_ids), 1),
                }
            )
    if rows:
        conn.execute(insert(dedup_table), rows)
    c = dedup_table.c
    for pc in partitions:
        if pc.prune_before is not None:
            conn.execute(
                delete(dedup_table).where(
                    c.source == source, c.partition == pc.partition, c.max_ts < pc.prune_before
                )
            )


def decode_ids(blob: bytes) -> list[tuple[str, float]]:
    return [(rid, ts) for rid, ts in orjson.loads(zlib.decompress(blob))]


def fold(rollups: Mapping[tuple[SeriesKey, int], BucketStats],
         block: int = MERGE_BLOCK) -> dict[FoldedKey, Row]:
    """Minute deltas keyed by (granularity, series, bucket start), merged per coarse bucket,
    as rows (``BucketStats.to_row()`` form: what the store writes and adds): all of
    :func:`fold_chunks` at once."""
    ids = {key: key for key, _ in rollups}
    return {(gran, key, start): row for gran, rows in fold_chunks(rollups, ids, block)
            for (key, start), row in rows.items()}


def blocks(refs: Sequence[SeriesRef], size: int = MERGE_BLOCK
           ) -> Iterator[Sequence[SeriesRef]]:
    """Sorted ``refs`` in blocks. Store ids go by range (``id // size``): every writer then
    cuts the same blocks, so the order it locks rows in (block, granularity, id) is one
    order for all. Anything else (:func:`fold`'s series keys) goes by count.

    >>> [list(b) for b in blocks([1, 2, 5, 6, 7, 12], 5)]
    [[1, 2], [5, 6, 7], [12]]
    """
    if not refs or not isinstance(refs[0], int):
        yield from chunks(refs, size)
        return
    for _, block in itertools.groupby(refs, key=lambda ref: ref // size):
        yield list(block)


def fold_chunks(
    rollups: Mapping[tuple[SeriesKey, int], BucketStats], ids: Mapping[SeriesKey, SeriesRef],
    block: int = MERGE_BLOCK,
) -> Iterator[tuple[str, dict[tuple[SeriesRef, int], Row]]]:
    """The rows of :func:`fold`, keyed by (``ids[series]``, bucket start), yielded a
    :func:`blocks` of series at a time in ascending ``ids`` order, and within a block a
    granularity at a time: minutes, then hours, then days (the order the store locks rows
    in).

    Each level folds the one below it (minutes into hours, hours into days): a day merges
    one row per hour touched, not one per minute. Only one block's rows are held: a
    checkpoint over ten thousand series does not build every minute row (nor the hour rows
    that share them) before writing the first. Within a series the rows add in the order
    the deltas came, so each row is the same to the bit whatever the blocks. The caller's
    objects are never changed (beyond folding their buffered latencies into their
    sketches): a checkpoint may be retried as it is.
    """
    add_all = BUCKET_ROWS.add_all
    deltas: dict[SeriesRef, list[tuple[int, Any]]] = {}
    for (key, ts), stats in rollups.items():
        deltas.setdefault(ids[key], []).append((int(ts), stats))
    for part in blocks(sorted(deltas), block):
        level = deltas
        finest = True
        for gran, size in GRANULARITIES.items():
            parts: dict[tuple[SeriesRef, int], list[Row]] = {}
            if finest:  # the block's minute deltas to rows, their latencies folded at once
                made = iter(rows_of([item for ref in part for _, item in level[ref]]))
            for ref in part:
                for ts, item in level[ref]:
                    row = next(made) if finest else item
                    k = (ref, ts - ts % size)
                    same = parts.get(k)
                    if same is None:
                        parts[k] = [row]
                    else:
                        same.append(row)
            # A bucket with one delta shares its row (rows are never changed in place); the
            # rows of a bucket with more are added in one pass (an hour of sixty minutes).
            rows = {k: same[0] if len(same) == 1 else add_all(same)
                    for k, same in parts.items()}
            yield gran, rows
            coarser: dict[SeriesRef, list[tuple[int, Any]]] = {}
            for (ref, start), row in rows.items():
                coarser.setdefault(ref, []).append((start, row))
            level, finest = coarser, False


def spans(rollups: Mapping[tuple[SeriesKey, int], BucketStats]) -> dict[SeriesKey, tuple]:
    """Per series, the first and last minute bucket start of this checkpoint."""
    lo: dict[SeriesKey, int] = {}
    hi: dict[SeriesKey, int] = {}
    for key, ts in rollups:
        ts = int(ts) - int(ts) % GRANULARITIES["minute"]
        if key not in lo or ts < lo[key]:
            lo[key] = ts
        if key not in hi or ts > hi[key]:
            hi[key] = ts
    return {k: (utc(lo[k]), utc(hi[k])) for k in lo}


def _all_spans(cp: Checkpoint) -> dict[SeriesKey, tuple]:
    """:func:`spans` of the rollups, plus any series only an experiment delta names (the
    pipeline puts every experiment event in the rollups too; a hand-built checkpoint may
    not)."""
    out = spans(cp.rollups)
    for _, _, key, ts in cp.experiments:
        if key not in out:
            hour = utc(hour_of(ts))
            out[key] = (hour, hour)
    for _, key, ts in cp.slices:
        if key not in out:
            hour = utc(hour_of(ts))
            out[key] = (hour, hour)
    return out


# The UPDATE of one rollup row (tests run it directly).
_UPDATE_ROLLUP = update_statement(rollups_table, ("granularity",))

# State snapshots built, encoded and written per chunk (a segment's is about 3.5 kB of JSON,
# and some 20 kB of dicts, lists and floats while it is built): like MERGE_BLOCK, the chunk
# is the checkpoint's peak of small objects, which stays resident where anything allocated
# meanwhile pins it.
STATE_CHUNK = 100


def merge_rollups(conn: Connection, rollups: Mapping[tuple[SeriesKey, int], BucketStats],
                  ids: Mapping[SeriesKey, int]) -> None:
    """Fold the minute deltas and read-merge-write the touched rows, a block of series and
    a granularity at a time (:func:`fold_chunks`): one SELECT per block and granularity,
    one executemany each way. Blocks keep the transient memory of a checkpoint over many
    series (rows folded, stored rows decoded, rows to write encoded) to about one block's
    worth."""
    for gran, rows in fold_chunks(rollups, ids):
        inserts, updates = merge_hourly(conn, rollups_table, {"granularity": gran}, rows, {},
                                        BUCKET_ROWS, utc)
        run_merged(conn, rollups_table, ("granularity",), inserts, updates)


def state_rows(
    source: str, state: Iterable[tuple[str, Any]], now: datetime
) -> list[dict[str, Any]]:
    """Rows for ``state_snapshots`` from (key, snapshot) pairs, each checked."""
    rows = []
    for key, value in state:
        version = value.get("version") if isinstance(value, Mapping) else None
        if not isinstance(version, int) or isinstance(version, bool):
            raise ValueError(f"state {key!r}: a snapshot must be a mapping with an int 'version'")
        rows.append(
            {"source": source, "key": key, "version": version, "data": value, "updated_at": now}
        )
    return rows


def _upsert_state_stmt(conn: Connection) -> Any:
    stmt = dialect_insert(conn, state_table)
    return stmt.on_conflict_do_update(
        index_elements=["source", "key"],
        set_={
            "version": stmt.excluded.version,
            "data": stmt.excluded.data,
            "updated_at": stmt.excluded.updated_at,
        },
    )


def upsert_state(conn: Connection, rows: list[dict[str, Any]]) -> None:
    if rows:
        executemany(conn, dialect_statement(conn, "upsert_state", _upsert_state_stmt), rows)


def write_state(conn: Connection, source: str, state: Mapping[str, Any], now: datetime) -> None:
    """Upsert ``state`` a chunk of keys at a time: a snapshot is read (and, for detection's
    :class:`~monitor.detect.deferred.DeferredStates`, built), encoded and written, then
    dropped, so a checkpoint over many segments never holds them all at once."""
    keys = list(state)
    for part in chunks(keys, STATE_CHUNK):
        upsert_state(conn, state_rows(source, ((k, state[k]) for k in part), now))


def write_checkpoint(
    conn: Connection,
    cp: Checkpoint,
    known_ids: Mapping[SeriesKey, int],
    now: datetime,
) -> dict[SeriesKey, int]:
    """All of a checkpoint's writes; returns the series ids it resolved (to cache on commit)."""
    fence(conn, cp.source, cp.partitions, now)
    write_dedup(conn, cp.source, cp.partitions)
    ids: dict[SeriesKey, int] = {}
    if cp.rollups or cp.experiments or cp.slices:
        ids = resolve_series(conn, _all_spans(cp), known_ids)
        merge_rollups(conn, cp.rollups, ids)
        if cp.experiments:
            write_experiments(conn, cp.experiments, ids, utc)
        if cp.slices:
            write_slices(conn, cp.slices, ids, utc)
    write_state(conn, cp.source, cp.state, now)
    write_alerts(conn, cp.source, cp.alerts, now)
    write_changes(conn, cp.source, cp.changes)
    if cp.outbox or cp.episodes or cp.applied_baselines:
        write_alerting(conn, cp.outbox, cp.episodes, cp.applied_baselines, now)
    return ids


def write_alerts(
    conn: Connection, source: str, alerts: Sequence[AlertRecord], now: datetime
) -> None:
    """Insert alert state changes; one already recorded (same fingerprint, state and time,
    e.g. re-decided after a crash) is skipped."""
    for record in alerts:
        stmt = (
            dialect_insert(conn, alerts_table)
            .values(
                source=source, fingerprint=record.fingerprint, rule=record.rule,
                state=record.state, at=record.at, severity=record.severity,
                route=record.labels["route"], labels=record.labels, summary=record.summary,
                details=record.details, recorded_at=now,
            )
            .on_conflict_do_nothing(index_elements=["fingerprint", "state", "at"])
        )
        conn.execute(stmt)
