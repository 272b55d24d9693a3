"""Must show 1 and 3 of the policy issue, end to end on the simulator's ``policy`` scenario:
simulate -> replay into SQLite -> ``specwatch policy`` (json, vllm, routing).

The scenario hides structure the policy must find (acceptance by ``tags.lang`` inside
code-assistant, verification cost rising with batch size, a prefill-bound route); its true
speed model (``monitor.simulate.policy_truth``) is the referee: wherever the true speedup of
another draft length beats the chosen one by more than 10%, the policy is wrong.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from monitor.cli import main
from monitor.policy.features import Buckets
from monitor.policy.render import vllm_k_for
from monitor.simulate.policy_truth import true_bucket_speedup

BATCH = Buckets((1, 2, 4, 8, 16, 32, 64, 128, 256))
TRUE_MARGIN = 0.10


@pytest.fixture(scope="module")
def policy_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp = tmp_path_factory.mktemp("policy")
    traffic = tmp / "policy.jsonl.gz"
    assert main(["simulate", "--scenario", "policy", "--duration", "16h", "--rate", "2",
                 "--seed", "11", "--start", "2026-11-02T00:00:00Z", "--out", str(traffic)]) == 0
    url = f"sqlite:///{tmp / 'policy.db'}"
    assert main(["replay", str(traffic), "--db", url, "--no-progress"]) == 0
    return url


def _run(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> str:
    capsys.readouterr()
    assert main(["policy", "--db", url, *args]) == 0
    return capsys.readouterr().out


@pytest.fixture(scope="module")
def doc(policy_db: str) -> dict[str, Any]:
    from monitor.config import load_config
    from monitor.policy.learn import compute_policy
    from monitor.store import Store

    with Store(policy_db) as store:
        return compute_policy(store, load_config(None)).to_json()


def _slices(doc: dict[str, Any], route: str) -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for s in doc["slices"]:
        if s["route"] == route:
            f = dict(s["features"]) if isinstance(s["features"], list) else s["features"]
            out[(f.get("tags", ""), f.get("batch_size", ""))] = s
    return out


def _k(s: dict[str, Any]) -> int:
    return s["setting"]["num_speculative_tokens"] if s["setting"]["speculate"] else 0


def test_speculation_off_where_it_loses_and_on_with_the_best_length_elsewhere(
        doc: dict[str, Any]) -> None:
    code = _slices(doc, "code-assistant")
    assert {tags for tags, _ in code} == {"lang=haskell", "lang=python", "lang=rust"}
    # haskell never pays; rust stops paying at batch 64; python from 128
    assert all(_k(s) == 0 for (tags, _), s in code.items() if tags == "lang=haskell")
    for batch in ("64-127", "128-255", "256+"):
        assert _k(code[("lang=rust", batch)]) == 0
    for batch in ("128-255", "256+"):
        assert _k(code[("lang=python", batch)]) == 0
    # at small batches python speculates deep, rust shallower
    for batch in ("1-1", "2-3", "4-7", "8-15"):
        assert _k(code[("lang=python", batch)]) == 4
        assert _k(code[("lang=rust", batch)]) == 2


def test_every_choice_agrees_with_the_true_speed_model(doc: dict[str, Any]) -> None:
    checked = 0
    for s in doc["slices"]:
        f = dict(s["features"]) if isinstance(s["features"], list) else s["features"]
        tags = dict(part.split("=", 1) for part in f.get("tags", "").split("&") if part)
        lo, hi = BATCH.bounds(f["batch_size"])
        chosen = _k(s)
        truth = {j: true_bucket_speedup(s["route"], tags, lo, hi, j)
                 for j in range(s["measured_length"] + 1)}
        best = max(truth.values())
        # wherever another length truly beats the chosen one by more than 10%, it is wrong
        assert best <= truth[chosen] * (1 + TRUE_MARGIN), (s["id"], chosen, truth)
        checked += 1
    assert checked >= 40


def test_on_held_out_later_traffic_the_policy_beats_every_alternative(
        doc: dict[str, Any]) -> None:
    train, held = doc["train"], doc["holdout"]
    assert held is not None and held["window"]["since"] == train["until"]  # later, not random
    goodput = {s["name"]: s["goodput"] for s in held["strategies"]}
    assert goodput["all_off"] == 1.0
    assert goodput["policy"] > max(goodput["all_on"], goodput["per_route"], 1.0)
    for c in held["comparisons"]:
        assert c["better"] and c["interval"][0] > 0, c
    # stationary traffic: acceptance held in every slice
    assert not held["unstable"]


def test_the_prefill_bound_route_is_named(doc: dict[str, Any]) -> None:
    gains = {g["route"]: g for g in doc["gains"]}
    assert gains["summarize"]["decode_bound"] is False
    assert "will not be felt" in gains["summarize"]["note"]
    assert gains["code-assistant"]["decode_bound"] is True


def test_vllm_output_reads_back_as_the_per_bucket_choices(
        policy_db: str, doc: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    configs = json.loads(_run(capsys, policy_db, "--format", "vllm"))
    schedules = {(s["pair"]["target_model"], s["pair"]["draft_model"]): s
                 for s in doc["schedules"]}
    assert len(configs) == len(schedules) == 3
    for cfg in configs:
        spec = cfg["speculative_config"]
        assert spec is not None
        table = spec["num_speculative_tokens_per_batch_size"]
        top = spec["num_speculative_tokens"]
        # the documented format: [lo, hi, K] ranges, inclusive, sorted, from batch size 1
        assert table[0][0] == 1 and all(lo <= hi for lo, hi, _ in table)
        assert all(a[1] < b[0] for a, b in zip(table, table[1:], strict=False))
        sched = schedules[(cfg["target"].split("@")[0], cfg["draft"].split("@")[0])]
        for bucket in sched["buckets"]:
            hi = bucket["hi"] if bucket["hi"] is not None else 300
            for batch in {bucket["lo"], (bucket["lo"] + hi) // 2, hi}:
                assert vllm_k_for(table, top, batch) == min(top, bucket["num_speculative_tokens"])
        # no batch size the data did not cover speculates
        assert vllm_k_for(table, top, 4096) == 0


def test_routing_table_turns_haskell_off(policy_db: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    table = yaml.safe_load(_run(capsys, policy_db, "--format", "routing",
                                "--features", "tags.lang"))
    code = next(r for r in table["routes"] if r["route"] == "code-assistant")
    by_lang = {s["match"]["tags"]["lang"]: s for s in code["slices"]}
    assert by_lang["haskell"]["speculate"] is False
    assert by_lang["python"]["speculate"] is True
