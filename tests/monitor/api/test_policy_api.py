"""``/api/v1/policy``: the document of ``specwatch policy --format json``, computed from the
store's slice rollups; a hindsight feature is a 400 naming the field (before any query), no
slice rollups a 404 saying so. ``/api/v1/policy/stored``: the newest stored policies first."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta

import pytest

from monitor.api.app import create_app
from monitor.cli import _config
from monitor.cli_policy import register
from monitor.config import Config
from monitor.policy.learn import compute_policy
from monitor.store import Checkpoint, Store
from tests.monitor.api import TestClient, bare_store
from tests.monitor.policy.records import HOUR, T0, Slice, records

# Inside route "code", acceptance depends on the tag lang and verification is dearer at
# large batches; "rag" waits on retrieval (see the report's test for that sentence).
SLICES = (
    Slice(tags="lang=py", batch="1-1", survival=(0.9, 0.8, 0.7), requests=60, plain=20),
    Slice(tags="lang=py", batch="64-127", survival=(0.9, 0.8, 0.7), m=0.5, requests=60,
          plain=20),
    Slice(tags="lang=xx", batch="1-1", survival=(0.3, 0.1, 0.05), requests=60),
    Slice(route="rag", batch="1-1", survival=(0.8, 0.6, 0.4), requests=60),
)
HOURS = 9
HINDSIGHT = ("spec.accepted_tokens", "output_tokens", "ttft_ms", "e2e_ms", "status", "outcome",
             "outcome.ok", "itl_ms", "output_hash", "gpu_seconds")


def at(ts: int) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def policy_cli(*argv: str) -> int:
    """``specwatch policy ...`` (its own parser: the command's registration is tested with
    the command)."""
    parser = argparse.ArgumentParser(prog="specwatch")
    sub = parser.add_subparsers(dest="command", required=True)

    def with_config(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", metavar="FILE")
        p.add_argument("--db", metavar="URL")

    register(sub, with_config, _config)
    args = parser.parse_args(["policy", *argv])
    return int(args.func(args))


def fill(store: Store) -> None:
    recs = records(SLICES, HOURS)
    store.commit(Checkpoint("telemetry", slices={(r.key, r.series, r.hour): r.stats
                                                 for r in recs}))


@pytest.fixture
def filled(store: Store) -> Store:
    fill(store)
    return store


def test_the_document_is_the_commands(filled: Store, migrated_url: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    client = TestClient(create_app(filled, config=Config()))
    r = client.get("/api/v1/policy", params={"route": "code"})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc == compute_policy(filled, Config(), route="code").to_json()
    assert policy_cli("--db", migrated_url, "--route", "code", "--format", "json") == 0
    assert doc == json.loads(capsys.readouterr().out)
    # what the section and the job show: a schedule per pair over the batch buckets, the
    # held-out comparison against the three alternatives, the route's gain
    [schedule] = doc["schedules"]
    assert [b["batch"] for b in schedule["buckets"]] == ["1-1", "64-127"]
    assert all(b["speedups"][0] == 1.0 and len(b["speedups"]) == 4
               for b in schedule["buckets"])
    assert {c["against"] for c in doc["holdout"]["comparisons"]} == {
        "all_on", "all_off", "per_route"}
    assert [g["route"] for g in doc["gains"]] == ["code"]
    assert doc["gains"][0]["decode_bound"] is True


def test_every_route_and_the_features_and_windows_asked_for(filled: Store) -> None:
    client = TestClient(create_app(filled))
    everything = client.get("/api/v1/policy", params={"route": ""}).json()
    assert everything["route"] is None
    assert {s["route"] for s in everything["slices"]} == {"code", "rag"}
    cut = at(T0 + 5 * HOUR)
    r = client.get("/api/v1/policy", params={
        "route": "code", "features": "tags.lang", "train_since": at(T0).isoformat(),
        "train_until": cut.isoformat(), "holdout_until": at(T0 + 7 * HOUR).isoformat()})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["features"] == ["tags.lang"]
    assert {s["features"]["tags.lang"] for s in doc["slices"]} == {"py", "xx"}
    assert (doc["train"]["since"], doc["train"]["until"]) == (
        "2027-01-15T08:00:00Z", "2027-01-15T13:00:00Z")
    assert doc["holdout_window"] == {"since": "2027-01-15T13:00:00Z",
                                     "until": "2027-01-15T15:00:00Z", "hours": 2}
    assert doc["holdout"]["requests"] == 2 * 3 * 60  # two hours of code's three slices


@pytest.mark.parametrize("field", HINDSIGHT)
def test_a_hindsight_feature_is_a_400_naming_it_before_any_query(field: str) -> None:
    store = bare_store()  # never migrated: a query would fail
    try:
        client = TestClient(create_app(store))
        r = client.get("/api/v1/policy", params={"features": f"tags.lang,{field}"})
        assert r.status_code == 400, r.text
        body = r.json()
        assert body["error"].startswith("invalid query parameter 'features': ")
        assert f"{field} is known only after the request ran" in body["error"]
        assert body["detail"][0]["parameter"] == "features"
    finally:
        store.close()


@pytest.mark.parametrize(("params", "name"), [
    ({"features": "colour"}, "features"),
    ({"train_since": "tomorrow"}, "train_since"),
    ({"train_until": "1x"}, "train_until"),
    ({"holdout_until": "soon"}, "holdout_until"),
    ({"train_since": "2d", "train_until": "3d"}, "train_since"),
    ({"train_since": "2d", "holdout_until": "3d"}, "holdout_until"),
    ({"trian_since": "2d"}, "trian_since"),
])
def test_bad_parameters_are_400s_naming_them(params: dict[str, str], name: str) -> None:
    store = bare_store()
    try:
        r = TestClient(create_app(store)).get("/api/v1/policy", params=params)
        assert r.status_code == 400, r.text
        assert f"'{name}'" in r.json()["error"]
    finally:
        store.close()


def test_nothing_to_learn_from_is_a_404_that_says_why(store: Store) -> None:
    client = TestClient(create_app(store))
    r = client.get("/api/v1/policy")
    assert r.status_code == 404
    assert r.json()["error"].startswith("no slice rollups in the window")
    fill(store)
    r = client.get("/api/v1/policy", params={"route": "nope"})
    assert r.status_code == 404 and "(route nope)" in r.json()["error"]
    # data, but none of it in the window asked for
    r = client.get("/api/v1/policy", params={"train_since": at(T0 + 100 * HOUR).isoformat()})
    assert r.status_code == 404, r.text


def test_stored_policies_newest_first(filled: Store) -> None:
    client = TestClient(create_app(filled))
    assert client.get("/api/v1/policy/stored").json() == []
    doc = compute_policy(filled, Config()).to_json()
    day = at(T0)
    ids = [filled.save_policy(computed_at=day + timedelta(days=i), train_since=day,
                              train_until=day + timedelta(hours=6 + i),
                              holdout_until=None if i else day + timedelta(hours=9),
                              features="tags,batch_size", document={**doc, "n": i})
           for i in range(3)]
    r = client.get("/api/v1/policy/stored")
    assert r.status_code == 200, r.text
    newest, previous = r.json()
    assert [newest["id"], previous["id"]] == [ids[2], ids[1]]
    assert newest["computed_at"] == "2027-01-17T08:00:00Z"
    assert newest["train_window"] == {"since": "2027-01-15T08:00:00Z",
                                      "until": "2027-01-15T16:00:00Z"}
    assert newest["holdout_until"] is None
    assert newest["features"] == "tags,batch_size"
    assert newest["document"] == {**doc, "n": 2}
    oldest = client.get("/api/v1/policy/stored", params={"limit": 3}).json()[-1]
    assert oldest["holdout_until"] == "2027-01-15T17:00:00Z"
    assert client.get("/api/v1/policy/stored", params={"limit": 0}).status_code == 400
