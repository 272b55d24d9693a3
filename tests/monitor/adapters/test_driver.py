"""The adapt loop: bad input is dead-lettered with its reason, its neighbours still adapted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from monitor.adapters import ADAPTERS
from monitor.adapters.defaults import Defaults
from monitor.adapters.driver import adapt_lines
from monitor.deadletter import FileDeadLetter
from tests.monitor.adapters import defaults, outputs

L8 = "llama-3.1-8b-instruct"


def _run(lines: list[bytes], engine: str, tmp_path: Path, d: Defaults | None = None,
         to_event: Any = None) -> tuple[Any, list[dict[str, Any]], list[dict[str, Any]]]:
    out: list[bytes] = []
    dead = FileDeadLetter(str(tmp_path / "dead.jsonl"))
    try:
        summary = adapt_lines(lines, to_event or ADAPTERS[engine], d or defaults(target_model=L8),
                              out.append, dead, {"file": "in.jsonl", "engine": engine})
    finally:
        dead.close()
    events = [json.loads(line) for line in b"".join(out).splitlines()]
    records = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
    return summary, events, records


def test_bad_lines_go_to_the_dead_letter_and_neighbours_are_adapted(tmp_path: Path) -> None:
    good = [orjson.dumps(raw) for raw in outputs("sglang")]
    no_tokens = outputs("sglang")[1]
    del no_tokens["meta_info"]["completion_tokens"]
    wrong_type = outputs("sglang")[2]
    wrong_type["meta_info"]["spec_verify_ct"] = "8"
    lines = [
        good[0],
        b"{not json",                                   # line 2
        good[1],
        b"",                                            # blank lines are skipped, not rejected
        orjson.dumps(no_tokens),                        # line 5
        b"42",                                          # line 6
        orjson.dumps(wrong_type),                       # line 7
        good[2] + b"\r\n",
        good[3],
    ]
    summary, events, records = _run(lines, "sglang", tmp_path)
    assert (summary.adapted, summary.rejected) == (4, 4)
    assert summary.line() == "4 requests adapted, 4 rejected"
    assert [e["request_id"] for e in events] == ["sg-1", "sg-2", "sg-3", "sg-4"]
    assert [(r["origin"]["line"], r["reason"].split(":")[0]) for r in records] == [
        (2, "invalid JSON"),
        (5, "meta_info.completion_tokens"),
        (6, "an SGLang response must be a JSON object"),
        (7, "meta_info.spec_verify_ct"),
    ]
    assert records[1]["reason"] == "meta_info.completion_tokens: missing"
    assert records[3]["reason"] == "meta_info.spec_verify_ct: must be an integer (got string '8')"
    # the evidence is kept whole, with where it came from
    assert json.loads(records[1]["raw"]) == no_tokens
    assert records[1]["origin"] == {"file": "in.jsonl", "engine": "sglang", "line": 5}


def test_a_batch_line_is_split_and_bad_elements_carry_their_index(tmp_path: Path) -> None:
    batch = outputs("sglang")[:3]
    batch[1]["meta_info"]["finish_reason"] = None  # still running when logged
    summary, events, records = _run([orjson.dumps(batch)], "sglang", tmp_path)
    assert (summary.adapted, summary.rejected) == (2, 1)
    assert [e["request_id"] for e in events] == ["sg-1", "sg-3"]
    (record,) = records
    assert record["origin"]["index"] == 1 and record["origin"]["line"] == 1
    assert record["reason"].startswith("meta_info.finish_reason: missing")
    assert json.loads(record["raw"]) == batch[1]


def test_events_the_parser_would_reject_are_not_written(tmp_path: Path) -> None:
    d = Defaults(route="r" * 129, target_model=L8, target_revision="1", target_tokenizer="t",
                 num_speculative_tokens=4)
    summary, events, records = _run([orjson.dumps(outputs("sglang")[0])], "sglang", tmp_path, d)
    assert (summary.adapted, events) == (0, [])
    assert records[0]["reason"] == ("adapted event is not valid telemetry v1: route must be "
                                    "1..128 characters (got 129)")


def test_an_adapter_bug_costs_one_request(tmp_path: Path) -> None:
    def flaky(raw: dict[str, Any], d: Defaults) -> dict[str, Any]:
        if raw["meta_info"]["id"] == "sg-2":
            raise KeyError("oops")
        return ADAPTERS["sglang"](raw, d)

    lines = [orjson.dumps(raw) for raw in outputs("sglang")]
    summary, events, records = _run(lines, "sglang", tmp_path, to_event=flaky)
    assert (summary.adapted, summary.rejected) == (5, 1)
    assert records[0]["reason"] == "internal error: KeyError: 'oops'"


# llama.cpp (own mapping) and recorded requests: test_llamacpp.py, test_recorded.py
@pytest.mark.parametrize("engine", sorted(set(ADAPTERS) - {"llamacpp", "record"}))
def test_fixture_files_adapt_without_rejections(engine: str, tmp_path: Path) -> None:
    lines = [orjson.dumps(raw) for raw in outputs(engine)]
    target = {"vllm": "llama-3.1-70b-instruct", "sglang": L8,
              "trtllm": "llama-3.3-70b-instruct"}[engine]
    summary, events, records = _run(lines, engine, tmp_path, defaults(target_model=target))
    assert (summary.adapted, summary.rejected, records) == (len(lines), 0, [])
    assert summary.ts_defaulted == (2 if engine == "trtllm" else 0)
