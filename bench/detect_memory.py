"""Detection's memory and snapshot cost per segment, without the store or the pipeline.

The events of a JSON-lines file (``bench/series_replay.py``'s, e.g. 10,000 series) go through
one :class:`monitor.detect.engine.Detection` in messages of ``--batch`` events, then every
segment is snapshotted as a checkpoint does it. Printed:

- live heap (``tracemalloc``) of detection per segment, after feeding;
- the snapshot: CPU seconds to build it, seconds to encode it (``orjson``, as the store
  does), JSON bytes per segment, and the extra traced memory at its peak (snapshot dicts
  plus their JSON text), per segment;
- with ``--top``, the allocation sites holding most of the live heap.

    PYTHONPATH=. python bench/detect_memory.py /tmp/sr/n10k.jsonl --config /tmp/sr/config.yaml
    cd ../base && PYTHONPATH=. python ../specwatch/bench/detect_memory.py ...  # another tree

On ``bench/series_replay.py``'s 200,000 events over 10,000 series (issue 18), before and
after compact snapshots and the slimmer segment: live heap 15,435 -> 12,019 B per segment,
JSON 4,984 -> 3,492 B per segment, the snapshot's extra peak 20,401 -> 12,088 B per segment
(CPU figures of these runs shared two cores with other work: compare within one sitting).
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

import orjson

sys.path.append(str(Path(__file__).resolve().parents[1]))  # PYTHONPATH first: --tree-like runs

from monitor.config import load_config  # noqa: E402
from monitor.detect.engine import SEGMENT_PREFIX, Detection  # noqa: E402
from monitor.jsonable import json_text  # noqa: E402
from monitor.telemetry.parse import event_from_obj  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("events", type=Path)
    ap.add_argument("--config", type=Path, default=None)
    ap.add_argument("--batch", type=int, default=500, help="events per observe() call")
    ap.add_argument("--top", type=int, default=0, help="allocation sites to list")
    args = ap.parse_args(argv)

    events = [event_from_obj(orjson.loads(line)) for line in args.events.open("rb")]
    det = Detection(load_config(args.config).detection)
    tracemalloc.start()
    before = tracemalloc.take_snapshot() if args.top else None
    base = tracemalloc.get_traced_memory()[0]
    cpu = time.process_time()
    for i in range(0, len(events), args.batch):
        det.observe(0, events[i:i + args.batch])
    fed = time.process_time() - cpu
    live = tracemalloc.get_traced_memory()[0] - base
    after = tracemalloc.take_snapshot() if args.top else None
    n = max(1, len(det.view().segments))
    print(f"events {len(events):,}  segments {n:,}  feed CPU {fed:.2f} s")
    print(f"live heap per segment  {live / n:,.0f} B")

    tracemalloc.reset_peak()
    start = tracemalloc.get_traced_memory()[0]
    cpu = time.process_time()
    state = det.snapshot()
    built = time.process_time() - cpu
    cpu = time.process_time()
    texts = {k: json_text(v) for k, v in state.items()}
    encoded = time.process_time() - cpu
    peak = tracemalloc.get_traced_memory()[1] - start
    seg = [len(t) for k, t in texts.items() if k.startswith(SEGMENT_PREFIX)]
    print(f"snapshot build CPU {built:.2f} s  encode CPU {encoded:.2f} s  "
          f"JSON per segment {sum(seg) / max(1, len(seg)):,.0f} B  "
          f"checkpoint peak per segment {peak / n:,.0f} B")
    if before is not None and after is not None:
        for stat in after.compare_to(before, "lineno")[:args.top]:
            print(stat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
