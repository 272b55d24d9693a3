"""Alerts survive restarts: a replay cut in two equals one uninterrupted replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monitor.cli import main
from monitor.store.store import Store

INCIDENTS = [
    "acceptance_shift:route=chat,at=2h,factor=0.85,for=2h",
    "tokenizer_swap:route=translation,at=3h,for=1h",
    "silence:route=summarize,at=4h,for=30m",
    "eviction:route=code-assistant,at=5h,share=0.5,slowdown=3,for=1h",
    # a target fine-tune the draft did not follow: judged against the revision it replaced
    "revision_change:route=creative-writing,at=3h,factor=0.8",
]


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("alerts") / "t.jsonl"
    args = ["simulate", "--scenario", "quiet", "--duration", "7h", "--rate", "6", "--seed", "9",
            "--start", "2026-11-02T00:00:00Z", "--duplicates", "0.01", "--out", str(path)]
    for incident in INCIDENTS:
        args += ["--incident", incident]
    assert main(args) == 0
    return path


def alerts_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_split_replay_raises_the_same_alerts(traffic: Path, tmp_path: Path) -> None:
    whole_out, split_out = tmp_path / "whole.jsonl", tmp_path / "split.jsonl"
    one, two = f"sqlite:///{tmp_path / 'one.db'}", f"sqlite:///{tmp_path / 'two.db'}"
    assert main(["replay", str(traffic), "--db", one, "--migrate", "--no-progress",
                 "--alerts-out", str(whole_out)]) == 0
    lines = traffic.read_bytes().splitlines(keepends=True)
    for n, part in enumerate((lines[: len(lines) * 3 // 7], lines[len(lines) * 3 // 7:])):
        path = tmp_path / f"part{n}.jsonl"
        path.write_bytes(b"".join(part))
        # A new process each time: nothing survives but what the store holds.
        assert main(["replay", str(path), "--db", two, "--no-progress",
                     "--alerts-out", str(split_out)] + (["--migrate"] if n == 0 else [])) == 0
    whole, split = alerts_of(whole_out), alerts_of(split_out)
    rules = {a["rule"] for a in whole}
    assert {"acceptance_drop", "tokenizer_mismatch", "telemetry_stale",
            "memory_contention"} <= rules
    assert split == whole
    [drift] = [a for a in whole if a["rule"] == "acceptance_drop"
               and a["labels"]["route"] == "creative-writing"]
    assert drift["details"]["previous"]["kind"] == "draft_drift"
    with Store(one) as s1, Store(two) as s2:
        assert [a.to_json() for a in s1.alerts()] == [a.to_json() for a in s2.alerts()]
        assert len(s1.alerts()) == len(whole)
        # the changes of setup too, with the live comparison's state and its event time
        changes = [c.to_dict() for c in s1.changes()]
        assert changes == [c.to_dict() for c in s2.changes()]
        # the fine-tune, and the tokenizer swap on translation there and back
        assert sorted((c["route"], c["kind"]) for c in changes) == [
            ("creative-writing", "draft_drift"), ("translation", "new_draft"),
            ("translation", "new_draft")]


def test_replay_writes_recommendations(traffic: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "recs.jsonl"
    url = f"sqlite:///{tmp_path / 'r.db'}"
    assert main(["replay", str(traffic), "--db", url, "--migrate", "--no-progress",
                 "--recommendations", str(out)]) == 0
    # one entry per segment; the tokenizer swap gave translation a second (foreign) draft
    recs = {(r["labels"]["route"], r["labels"]["draft_model"]): r
            for r in map(json.loads, out.read_text().splitlines())}
    recs = {route: r for (route, draft), r in recs.items() if "qwen2.5-0.5b" not in draft
            or route == "code-assistant"}
    assert recs["code-assistant"]["recommendation"] == "on"
    assert recs["code-assistant"]["evidence"]["rate"] > 0.7
    assert recs["code-assistant"]["recommended_num_speculative_tokens"] >= 1
    # translation runs at 0.35 under the default 0.40 break-even: turn it off
    assert recs["translation"]["recommendation"] == "off"
    assert main(["replay", str(traffic), "--db", url, "--no-progress",
                 "--recommendations", "-"]) == 0
    assert "speculation off  translation" in capsys.readouterr().out
