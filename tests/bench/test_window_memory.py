"""bench/window_memory.py on 20 minutes of traffic: packed windows are the smaller."""

from __future__ import annotations

import re

from tests.bench.run import run_bench


def test_packed_windows_take_less_than_lists() -> None:
    out = run_bench("bench/window_memory.py", "--minutes", "20", "--rate", "5")
    rows = {m[1]: (int(m[2].replace(",", "")), int(m[3].replace(",", "")))
            for m in re.finditer(r"^(break-even|position curve)\s+([\d,]+)\s+([\d,]+)$", out,
                                 re.M)}
    assert set(rows) == {"break-even", "position curve"}
    assert all(packed < lists for lists, packed in rows.values())
