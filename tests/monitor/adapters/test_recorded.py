"""Recorded real-engine requests (llama.cpp, transformers, llama-cpp-python on this CPU) ->
``specwatch adapt --from record`` -> ``specwatch replay`` -> the store.

The numbers checked are the recorded ones, summed here with the stdlib from the file itself:
per run and route the store holds exactly the recorded requests, drafted, accepted and output
tokens. The rules are checked against what the records say happened: the run whose draft the
server refused (``run-mismatch1``, drafted 0 on every request) and the universal assisted
decoding run pair a target and a draft with different tokenizers; only the refused draft stops
speculation.
"""

from __future__ import annotations

import argparse
import io
import json
import math
from collections import defaultdict
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import orjson
import pytest

from monitor.adapters import ADAPTERS, Defaults
from monitor.adapters.cli import register
from monitor.adapters.common import NOTE_KEY, AdapterError
from monitor.adapters.driver import adapt_lines
from monitor.adapters.record import to_event
from monitor.cli import main
from monitor.store.store import Store
from tests.monitor.adapters import FIXTURES, event_ts, parses_cleanly

# Copied verbatim from shared/data/real-engine-events.jsonl (180 requests).
REAL = FIXTURES / "real-engine-events.jsonl"
START = 1793628000.0  # 2026-11-02T14:00:00Z: --default-ts of every adapt run here
MISMATCH = "run-mismatch1/mismatch-smollm2-draft/code"
UAD = "hf-mismatch-uad"
# What each recorded run is, from its spec_type and spec_params (record.SPEC_TYPES): method,
# draft length, whether a draft model is named.
RUNS = {
    "run-qwen15/draft-simple": ("draft_model", 3, True),
    "run-qwen15/ngram-simple": ("ngram", 48, False),
    "run-qwen05-self/self-draft": ("draft_model", 3, True),
    "run-smollm2/ngram-simple-n3m8": ("ngram", 8, False),
    "run-smollm2/ngram-simple-default": ("ngram", 48, False),
    "run-gemma/ngram-simple-n3m8": ("ngram", 8, False),
    "run-mismatch1/mismatch-smollm2-draft": ("draft_model", 3, True),
    "hf-smollm2-pld-v2": ("ngram", 10, False),
    "hf-qwen-assisted": ("draft_model", 20, True),
    "hf-mismatch-uad": ("draft_model", 20, True),
    "hf-smollm2-earlyexit": ("early_exit", 20, False),
    "lcp-smollm2-pld": ("ngram", 10, False),
}


def records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in REAL.read_text(encoding="utf-8").splitlines()]


def recorded_sums(rows: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Per ``run/route``: requests, drafting requests, drafted, accepted, output tokens."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for r in rows:
        t = out[f"{r['run']}/{r['route']}"]
        t[0] += 1
        t[1] += r["drafted_tokens"] > 0
        t[2] += r["drafted_tokens"]
        t[3] += r["accepted_tokens"]
        t[4] += r["output_tokens"]
    return dict(out)


def adapt_cli(src: Path, out: Path, dead: Path) -> None:
    parser = argparse.ArgumentParser(prog="specwatch")
    register(parser.add_subparsers(dest="command", required=True), None, None)
    args = parser.parse_args(["adapt", "--from", "record", str(src), "--out", str(out),
                              "--dead-letter", str(dead), "--default-ts", str(START)])
    assert args.func(args) == 0
    assert dead.read_text() == ""


def replay(events: Path, db_url: str, tmp_path: Path) -> None:
    dead = tmp_path / "replay-dead.jsonl"
    assert main(["replay", str(events), "--db", db_url, "--migrate", "--no-progress",
                 "--dead-letter", str(dead)]) == 0
    assert dead.read_text() == ""


# -- the adapter -----------------------------------------------------------------------------


def _adapt_all() -> list[dict[str, Any]]:
    out = io.BytesIO()
    rejected: list[str] = []

    class Dead:
        def send(self, rejection: Any, origin: dict[str, Any]) -> None:
            rejected.append(rejection.reason)

    summary = adapt_lines(REAL.read_bytes().splitlines(), ADAPTERS["record"],
                          Defaults(clock=lambda: START), out.write, Dead())  # type: ignore[arg-type]
    assert (summary.adapted, summary.rejected, rejected) == (180, 0, [])
    assert summary.ts_defaulted == 180
    return [orjson.loads(line) for line in out.getvalue().splitlines()]


def test_every_record_becomes_one_event_with_the_recorded_counts() -> None:
    rows, events = records(), _adapt_all()
    assert len({e["request_id"] for e in events}) == 180
    for r, e in zip(rows, events, strict=True):
        parses_cleanly(e)
        method, k, has_draft = RUNS[r["run"]]
        assert e["route"] == f"{r['run']}/{r['route']}"
        assert e["spec"]["method"] == method and e["spec"]["num_speculative_tokens"] == k
        assert ("draft" in e) is has_draft
        assert (e["spec"]["drafted_tokens"], e["spec"]["accepted_tokens"],
                e["output_tokens"], e["prompt_tokens"]) == (
            r["drafted_tokens"], r["accepted_tokens"], r["output_tokens"], r["prompt_tokens"])
        assert e["spec"].get("verify_steps") == r.get("verify_steps")
        assert e["spec"]["params"] == {"spec_type": r["spec_type"], **r["spec_params"]}
        assert e["target"] == {"model": r["target_model"], "revision": r["target_revision"],
                               "tokenizer": r["tokenizer_id"]}
        if has_draft:
            assert e["draft"] == {"model": r["draft_model"], "revision": r["draft_revision"],
                                  "tokenizer": r["draft_tokenizer_id"]}
        assert e["e2e_ms"] == pytest.approx(r["latency_s"] * 1000)
        if "generation_ms" in r:  # llama-server's predicted_ms: decode time is the engine's
            assert e["e2e_ms"] - e["ttft_ms"] == pytest.approx(r["generation_ms"])
        else:
            assert "ttft_ms" not in e
        assert e["engine"] == {"llama.cpp": "llamacpp", "transformers": "transformers",
                               "llama-cpp-python": "llama-cpp-python"}[r["runtime"].split()[0]]
        assert e["record"] == {"run": r["run"], "route": r["route"], "runtime": r["runtime"]}
        assert NOTE_KEY in e


def test_records_without_ts_run_back_to_back_from_the_start() -> None:
    rows, events = records(), _adapt_all()
    ends = [event_ts(e) for e in events]
    finished = START
    for r, end in zip(rows, ends, strict=True):
        finished += r["latency_s"]
        assert end == pytest.approx(finished, abs=1e-3)
    # a new adapt run (a new Defaults) starts its own timeline
    again = to_event(rows[0], Defaults(clock=lambda: START))
    assert event_ts(again) == pytest.approx(START + rows[0]["latency_s"], abs=1e-3)


def test_a_recorded_ts_and_request_id_are_kept() -> None:
    raw = dict(records()[0], ts="2026-11-02T15:00:00Z", request_id="req-1")
    e = to_event(raw, Defaults(clock=lambda: START))
    assert (e["request_id"], event_ts(e), NOTE_KEY in e) == ("req-1", START + 3600, False)
    assert event_ts(to_event(dict(raw, ts=START + 5), Defaults())) == START + 5


@pytest.mark.parametrize(("edit", "reason"), [
    (lambda r: r.update(accepted_tokens=999), "speculative stats: 999 accepted drafts > 57"),
    (lambda r: r.pop("latency_s"), "not a recorded request"),
    (lambda r: r.update(spec_type="medusa"), "spec_type: unknown 'medusa'"),
    (lambda r: r.update(spec_type="prompt-lookup", spec_params={}),
     "spec_params: none of prompt_lookup_num_tokens, num_pred_tokens"),
    (lambda r: r.update(generation_ms=99999.0), "generation_ms: 99999.0 is longer than"),
    (lambda r: r.update(ts="yesterday"), "ts: want RFC 3339 with zone or Unix seconds"),
    (lambda r: r.update(output_tokens=-1), "output_tokens: must be >= 0"),
])  # fmt: skip
def test_problems_are_named(edit: Any, reason: str) -> None:
    raw = records()[0]
    edit(raw)
    with pytest.raises(AdapterError) as err:
        to_event(raw, Defaults(clock=lambda: START))
    assert err.value.reason.startswith(reason), err.value.reason


# -- through replay into the store -----------------------------------------------------------


def test_recorded_runs_land_in_the_store_with_the_recorded_sums(
    db_url: str, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    adapt_cli(REAL, events, tmp_path / "dead.jsonl")
    replay(events, db_url, tmp_path)
    want = recorded_sums(records())
    assert len(want) == 23
    got: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    with Store(db_url) as store:
        rows = store.ratios(granularity="day")
        alerts = store.alerts()
    for r in rows:
        t = got[r.route]
        for i, v in enumerate((r.requests, r.drafting_requests, r.drafted_tokens,
                               r.accepted_tokens, r.output_tokens)):
            t[i] += v
    assert dict(got) == want
    # one series per run and route: nothing of two runs is ever summed together
    assert len({r.series for r in rows}) == 23
    # acceptance exactly as recorded (reference tables A-C), never a mean of ratios
    rate = {route: t[3] / t[2] if t[2] else None for route, t in got.items()}
    assert rate["run-qwen15/draft-simple/code"] == 444 / 547
    assert rate["run-qwen15/draft-simple/creative"] == 320 / 729
    assert rate["hf-smollm2-pld-v2/code"] == 190 / 1831
    # drafted nothing: no rate at all, not 0 (n-gram without a match; the refused draft)
    assert rate["run-qwen15/ngram-simple/creative"] is None and rate[MISMATCH] is None

    # `specwatch ratios` shows the same rows
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["ratios", "--db", db_url, "--granularity", "day", "--route", MISMATCH,
                     "--format", "json"]) == 0
    (shown,) = json.loads(buf.getvalue())
    assert (shown["requests"], shown["drafted_tokens"], shown["acceptance_rate"]) == (2, 0, None)

    # tokenizer_mismatch on the two pairs whose tokenizers differ, per route; nothing else
    mismatch = {(a.labels["route"], a.labels["draft_model"]) for a in alerts
                if a.rule == "tokenizer_mismatch" and a.state == "firing"}
    assert mismatch == {(f"{UAD}/code", records()[148]["draft_model"]),
                        (f"{UAD}/creative", records()[148]["draft_model"]),
                        (MISMATCH, records()[120]["draft_model"])}
    # The recorded runs are too short for speculation_inactive: it needs a route observed
    # for a whole 10-minute window holding 20+ requests, and the refused-draft run is 2
    # requests over 7 s (see the session test below).
    assert [a for a in alerts if a.rule == "speculation_inactive"] == []


def sessions(rows: list[dict[str, Any]], minutes: float) -> list[dict[str, Any]]:
    """Every recorded run and route as a longer session of the same server: its recorded
    requests again and again, in order, until they span ``minutes`` (fresh request ids, times
    back to back by the recorded latencies)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["run"], r["route"]), []).append(r)
    out = []
    for (run, route), group in groups.items():
        reps = math.ceil(minutes * 60 / sum(r["latency_s"] for r in group))
        out += [dict(r, request_id=f"{run}/{route}/{rep}/{i}")
                for rep in range(reps) for i, r in enumerate(group)]
    return out


def test_a_recorded_run_as_a_session_raises_speculation_inactive_only_for_the_refused_draft(
    db_url: str, tmp_path: Path
) -> None:
    """With the shipped detection settings (10-minute window, 20 requests). Each run becomes
    a 12-minute session of its recorded requests; n-gram runs that often draft nothing
    (qwen15 ngram-simple creative never drafts; smollm2 default 8 of 10 creative requests)
    have no draft model and must not fire; the refused draft model must."""
    rows = sessions(records(), 12)
    src = tmp_path / "sessions.jsonl"
    src.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    events = tmp_path / "events.jsonl"
    adapt_cli(src, events, tmp_path / "dead.jsonl")
    replay(events, db_url, tmp_path)
    adapted = [json.loads(line) for line in events.read_text().splitlines()]
    first = min(event_ts(e) for e in adapted if e["route"] == MISMATCH)
    with Store(db_url) as store:
        inactive = store.alerts(rule="speculation_inactive")
        rows_ = store.ratios(granularity="day")
    assert [(a.state, a.labels["route"]) for a in inactive] == [("firing", MISMATCH)]
    # after a whole window of the session, not on its first no-draft requests
    assert inactive[0].at.timestamp() >= first + 9 * 60
    assert inactive[0].details["no_draft_requests"] >= 20
    # and the store still holds exactly the session's counts
    drafted = sum(r.drafted_tokens for r in rows_)
    assert drafted == sum(r["drafted_tokens"] for r in rows)
