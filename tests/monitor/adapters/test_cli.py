"""``specwatch adapt`` end to end: engine files -> telemetry v1 -> ``specwatch replay`` -> the
store holds the per-route acceptance computed by hand.

``monitor.cli.main`` only knows ``adapt`` once it is registered there, so the command is run
through a parser built here with ``register``; ``replay`` is the real ``monitor.cli.main``.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from monitor.adapters.cli import register
from monitor.adapters.defaults import MappingError
from monitor.cli import main
from monitor.exceptions import SpecwatchError
from monitor.store.store import Store
from tests.monitor.adapters import FIXTURES, MAPPING

TARGET = {"vllm": "llama-3.1-70b-instruct", "sglang": "llama-3.1-8b-instruct",
          "trtllm": "llama-3.3-70b-instruct"}


def adapt(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="specwatch")
    register(parser.add_subparsers(dest="command", required=True), None, None)
    args = parser.parse_args(["adapt", *argv])
    return int(args.func(args))


def _adapt_fixture(engine: str, tmp_path: Path) -> tuple[Path, Path]:
    out, dead = tmp_path / f"{engine}.events.jsonl", tmp_path / f"{engine}.dead.jsonl"
    assert adapt(["--from", engine, str(FIXTURES / f"{engine}.jsonl"), "--out", str(out),
                  "--dead-letter", str(dead), "--mapping", str(MAPPING),
                  "--target-model", TARGET[engine],
                  "--default-ts", "2026-11-02T14:07:30Z"]) == 0
    return out, dead


def test_adapt_then_replay_gives_per_route_acceptance(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for engine in ("vllm", "sglang", "trtllm"):
        out, dead = _adapt_fixture(engine, tmp_path)
        assert dead.read_text() == ""
        replay_dead = tmp_path / f"{engine}.replay-dead.jsonl"
        # one source id per file: each file is its own stream of event time
        assert main(["replay", str(out), "--db", db_url, "--migrate", "--no-progress",
                     "--source-id", f"adapt-{engine}", "--dead-letter", str(replay_dead)]) == 0
        assert replay_dead.read_text() == "", engine
    err = capsys.readouterr().err
    assert "adapt vllm " in err and ": 6 requests adapted, 0 rejected" in err
    assert ": 5 requests adapted, 0 rejected; 2 with ts not from the engine" in err

    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    with Store(db_url) as store:
        for row in store.ratios(granularity="minute"):
            t = totals[row.route]
            t[0] += row.requests
            t[1] += row.errors
            t[2] += row.accepted_tokens
            t[3] += row.drafted_tokens
            t[4] += row.verify_steps
    # (requests, errors, accepted A, drafted D, verify steps S), summed from the hand-computed
    # values in test_vllm / test_sglang / test_trtllm:
    assert dict(totals) == {
        # v1..v4 + offline-5: A = 10 + 77 + 0 + 1 + 8, D = 129 + 120 + 0 + 12 + 18,
        # S = 43 + 40 + 0 + 4 + 6; v4 ended in error
        "code-assistant": [5, 1, 96, 279, 93],
        "chat": [1, 0, 11, 45, 17],  # v6, n-gram
        # sg-1..6: A = 18 + 14 + 17 + 0 + 2 + 5, D = 40 + 24 + 32 + 0 + 8 + 12,
        # S = 10 + 6 + 8 + 0 + 2 + 3; sg-5 error and sg-6 cancelled
        "creative-writing": [6, 2, 56, 116, 29],
        # t1..t3 + RequestOutputs 7, 8: A = 25 + 6 + 0 + 10 + 3, D = 48 + 20 + 0 + 20 + 16;
        # S only where reported: 12 + 5 + 0; request 8 timed out
        "summarize": [5, 1, 44, 104, 17],
    }
    rates = {route: a / d for route, (_, _, a, d, _) in totals.items()}
    assert rates == pytest.approx({"code-assistant": 96 / 279, "chat": 11 / 45,
                                   "creative-writing": 56 / 116, "summarize": 44 / 104})


def test_bad_lines_are_dead_lettered_and_the_rest_still_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = (FIXTURES / "vllm.jsonl").read_text().splitlines()
    broken = json.loads(source[1])
    broken["metrics"]["speculative_decoding"]["num_draft_tokens"] = None
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join([source[0], json.dumps(broken), "[1, 2", source[2]]) + "\n")
    out, dead = tmp_path / "out.jsonl", tmp_path / "dead.jsonl"
    assert adapt(["--from", "vllm", str(path), "--out", str(out), "--dead-letter", str(dead),
                  "--mapping", str(MAPPING)]) == 0
    assert [json.loads(line)["request_id"] for line in out.read_text().splitlines()] == [
        "chatcmpl-v1", "chatcmpl-v3"]
    records = [json.loads(line) for line in dead.read_text().splitlines()]
    assert [(r["origin"]["line"], r["reason"][:40]) for r in records] == [
        (2, "metrics.speculative_decoding.num_draft_t"),
        (3, "invalid JSON: unexpected end of data: li"),
    ]
    assert records[0]["reason"] == "metrics.speculative_decoding.num_draft_tokens: missing (null)"
    assert records[0]["origin"]["file"] == str(path) and records[0]["origin"]["engine"] == "vllm"
    assert "2 requests adapted, 2 rejected" in capsys.readouterr().err


def test_stdin_to_stdout_with_flags_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    line = (FIXTURES / "sglang.jsonl").read_text().splitlines()[0]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(line.encode() + b"\n")))
    assert adapt(["--from", "sglang", "--route", "chat", "--target-model", "m",
                  "--target-revision", "1", "--target-tokenizer", "t",
                  "--num-speculative-tokens", "4", "--method", "eagle",
                  "--instance", "pod-2", "--request-id-prefix", "eu/"]) == 0
    captured = capsys.readouterr()
    event = json.loads(captured.out)
    assert (event["request_id"], event["route"], event["instance"]) == ("eu/sg-1", "chat",
                                                                        "pod-2")
    assert event["spec"]["accepted_tokens"] == 18 and "draft" not in event
    assert "1 requests adapted, 0 rejected" in captured.err


@pytest.mark.parametrize(("argv", "message"), [
    (["--from", "vllm", "x.jsonl"], "--route, --target-revision, --target-tokenizer required "
     "without --mapping"),
    (["--from", "vllm", "x.jsonl", "--route", "r", "--target-revision", "1",
      "--target-tokenizer", "t", "--draft-model", "d"], "--draft-model needs --draft-revision"),
    (["--from", "vllm", "missing.jsonl", "--mapping", str(MAPPING)], "missing.jsonl"),
])  # fmt: skip
def test_usage_problems_are_clear(argv: list[str], message: str, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecwatchError) as err:
        adapt([*argv, "--dead-letter", str(tmp_path / "dead.jsonl")])
    assert message in str(err.value)


def test_bad_mapping_and_bad_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("m:\n  colour: blue\n")
    with pytest.raises(MappingError, match="mapping error at m.colour: unknown key"):
        adapt(["--from", "vllm", "--mapping", str(bad)])
    for argv in (["--from", "tgi"], ["--from", "vllm", "--num-speculative-tokens", "0"],
                 ["--from", "vllm", "--default-ts", "yesterday"]):
        with pytest.raises(SystemExit) as exit_:
            adapt(argv)
        assert exit_.value.code == 2
    assert "cannot read time 'yesterday'" in capsys.readouterr().err


def test_help_documents_where_missing_fields_come_from(
    capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        adapt(["--help"])
    text = capsys.readouterr().out
    for needle in ("--mapping", "num_speculative_tokens", "--route", "--target-revision",
                   "served model name", "adapter_note", "meta_info", "/perf_metrics"):
        assert needle in text, needle
