"""/api/v1/ratios and /api/v1/latency: the CLI's rows and filters, the sketches' quantiles."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.api.app import create_app
from monitor.cli import main
from monitor.store.store import Store
from tests.monitor.api import TestClient, bare_store
from tests.monitor.store.helpers import T0, at, checkpoint, event


def _client(store: Store) -> TestClient:
    return TestClient(create_app(store))


@pytest.fixture(scope="module")
def unopened() -> Iterator[TestClient]:
    """An app on a store never migrated: a request that reached the database would fail,
    so the refusals below are shown to happen before any query."""
    store = bare_store()
    try:
        yield _client(store)
    finally:
        store.close()


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("api") / "t.jsonl"
    assert main(["simulate", "--duration", "2h", "--rate", "0.3", "--seed", "5",
                 "--start", "2026-11-02T00:00:00Z", "--out", str(path)]) == 0
    return path


@pytest.fixture
def replayed(db_url: str, traffic: Path) -> Iterator[Store]:
    assert main(["replay", str(traffic), "--db", db_url, "--migrate", "--no-progress"]) == 0
    store = Store(db_url)
    try:
        yield store
    finally:
        store.close()


CLI_QUERIES = [
    [],
    ["--granularity", "minute", "--route", "chat", "--since", "2026-11-02T00:30:00Z",
     "--until", "2026-11-02T01:00:00Z"],
    ["--granularity", "day"],
    ["--since", "2026-11-02T01:00:00+01:00"],  # zones honoured: that is 00:00Z
    ["--route", "no-such-route"],
]


def _query(args: list[str]) -> dict[str, str]:
    return {args[i].removeprefix("--"): args[i + 1] for i in range(0, len(args), 2)}


def test_ratios_are_the_cli_output_byte_for_byte(
    replayed: Store, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    client = _client(replayed)
    for args in CLI_QUERIES:
        for fmt, ctype in (("json", "application/json"), ("csv", "text/csv; charset=utf-8")):
            assert main(["ratios", "--db", db_url, "--format", fmt, *args]) == 0
            cli = capsys.readouterr().out
            r = client.get("/api/v1/ratios", params={**_query(args), "format": fmt})
            assert r.status_code == 200, (args, r.text)
            assert r.headers["content-type"] == ctype
            assert r.text == cli, args
        rows = client.get("/api/v1/ratios", params=_query(args)).json()  # json by default
        csv_text = client.get("/api/v1/ratios", params={**_query(args), "format": "csv"}).text
        assert len(csv_text.splitlines()) == len(rows) + 1
    rows = client.get("/api/v1/ratios").json()
    assert len({r["route"] for r in rows}) == 5 and all(r["granularity"] == "hour" for r in rows)


def test_ratio_filters_and_durations(store: Store) -> None:
    evs = [event(f"c{i}", T0 + 30 * i, "code") for i in range(240)]  # 22:00 .. 23:59:30
    evs += [event(f"w{i}", T0 + 3600 + 60 * i, "creative", spec=False) for i in range(90)]
    store.commit(checkpoint(evs, next_offset=len(evs)))
    client = _client(store)

    def get(**params: str) -> list[dict]:
        r = client.get("/api/v1/ratios", params=params)
        assert r.status_code == 200, r.text
        return r.json()

    hours = get()
    assert [(r["bucket_start"], r["route"]) for r in hours] == [
        ("2026-11-02T22:00:00Z", "code"), ("2026-11-02T23:00:00Z", "code"),
        ("2026-11-02T23:00:00Z", "creative"), ("2026-11-03T00:00:00Z", "creative"),
    ]
    assert [r["requests"] for r in get(route="code")] == [120, 120]
    assert get(route="cod") == []  # equality, not a prefix
    assert get(route="") == hours  # an empty filter is no filter
    assert [r["requests"] for r in get(route="creative")] == [60, 30]
    assert hours[2]["draft_model"] is None and hours[2]["acceptance_rate"] is None
    assert hours[0]["acceptance_rate"] == pytest.approx(0.7)
    since = at(T0 + 3600).isoformat()
    assert {r["bucket_start"] for r in get(since=since, until=at(T0 + 7200).isoformat())} == {
        "2026-11-02T23:00:00Z"}
    minutes = get(granularity="minute", route="code", since=since)
    assert len(minutes) == 60 and sum(r["requests"] for r in minutes) == 120
    # A duration ago, as in the CLI: far enough back covers everything.
    assert get(since="100000d") == hours
    assert get(until="100000d") == []


def test_latency_quantiles_from_the_sketches(store: Store) -> None:
    # ttft 100 ms, e2e 500 ms, 20 output tokens: decode 20 / 0.4 s = 50 tok/s.
    evs = [event(f"a{i}", T0 + 10 * i, "code") for i in range(12)]  # 22:00:00 .. 22:01:50
    evs += [event(f"b{i}", T0 + 10 * i, "code", e2e_ms=1100.0, ttft_ms=None, status="error")
            for i in range(12, 18)]  # 22:02:00 .. 22:02:50, no ttft: no decode rate either
    store.commit(checkpoint(evs, next_offset=len(evs)))
    client = _client(store)

    r = client.get("/api/v1/latency", params={"granularity": "minute"})
    assert r.status_code == 200, r.text
    rows = r.json()
    assert [row["bucket_start"] for row in rows] == [
        "2026-11-02T22:00:00Z", "2026-11-02T22:01:00Z", "2026-11-02T22:02:00Z"]
    first = rows[0]
    assert (first["route"], first["draft_model"], first["num_speculative_tokens"]) == (
        "code", "llama-1b", 4)
    assert first["requests"] == 6 and first["errors"] == 0
    assert first["ttft_ms"]["count"] == 6
    assert first["ttft_ms"]["p50"] == pytest.approx(100.0, rel=0.01)
    assert first["e2e_ms"]["p99"] == pytest.approx(500.0, rel=0.01)
    assert first["decode_tps"]["p50"] == pytest.approx(50.0, rel=0.01)
    last = rows[2]
    assert last["errors"] == 6 and last["ttft_ms"]["count"] == 0
    assert last["ttft_ms"]["p50"] is None and last["decode_tps"]["p99"] is None
    assert last["e2e_ms"]["p50"] == pytest.approx(1100.0, rel=0.01)

    merged = client.get("/api/v1/latency", params={"granularity": "minute",
                                                   "per_bucket": "false"}).json()
    assert len(merged) == 1 and merged[0]["bucket_start"] is None
    m = merged[0]
    assert (m["requests"], m["errors"], m["e2e_ms"]["count"]) == (18, 6, 18)
    assert m["e2e_ms"]["p50"] == pytest.approx(500.0, rel=0.01)
    assert m["e2e_ms"]["p99"] == pytest.approx(1100.0, rel=0.01)
    # Hour rows hold the same sketches merged: the same answer from one bucket.
    (hour,) = client.get("/api/v1/latency").json()
    assert hour["bucket_start"] == "2026-11-02T22:00:00Z"
    assert hour["e2e_ms"] == m["e2e_ms"] and hour["requests"] == 18
    assert client.get("/api/v1/latency", params={"route": "other"}).json() == []
    window = client.get("/api/v1/latency", params={
        "granularity": "minute", "since": at(T0 + 60).isoformat(),
        "until": at(T0 + 120).isoformat()}).json()
    assert [w["bucket_start"] for w in window] == ["2026-11-02T22:01:00Z"]


BAD = [
    ("/api/v1/ratios", {"granularity": "week"}, "granularity"),
    ("/api/v1/ratios", {"format": "table"}, "format"),
    ("/api/v1/ratios", {"since": "yesterday"}, "since"),
    ("/api/v1/ratios", {"until": "2026-11-02T14:00:00"}, "until"),  # no zone
    ("/api/v1/ratios", {"since": "99999999999d"}, "since"),  # before year 1
    ("/api/v1/ratios", {"since": "0001-01-01T00:00:00+01:00"}, "since"),
    ("/api/v1/ratios", {"since": "1h", "until": "2h"}, "since"),
    ("/api/v1/ratios", {"since": "2026-11-03T00:00:00Z", "until": "2026-11-02T00:00:00Z"},
     "since"),
    ("/api/v1/ratios", {"granulrity": "day"}, "granulrity"),
    ("/api/v1/latency", {"granularity": "second"}, "granularity"),
    ("/api/v1/latency", {"per_bucket": "maybe"}, "per_bucket"),
    ("/api/v1/latency", {"until": "-5m"}, "until"),
    ("/api/v1/latency", {"format": "csv"}, "format"),  # not a latency parameter
]


@pytest.mark.parametrize(("path", "params", "name"), BAD,
                         ids=[f"{p} {sorted(q.items())}" for p, q, _ in BAD])
def test_bad_parameters_are_400s_naming_them(unopened: TestClient, path: str, params: dict,
                                             name: str) -> None:
    r = unopened.get(path, params=params)
    assert r.status_code == 400, r.text
    body = r.json()
    assert set(body) == {"error", "detail"}
    assert f"'{name}'" in body["error"]
    assert any(d["parameter"] == name for d in body["detail"])
    assert "Traceback" not in r.text


def test_json_rows_have_the_documented_shape(store: Store) -> None:
    store.commit(checkpoint([event("x", T0, "code")]))
    client = _client(store)
    (row,) = client.get("/api/v1/ratios").json()
    props = client.get("/openapi.json").json()["components"]["schemas"]["RatioOut"]["properties"]
    assert set(row) == set(props)
    assert json.loads(client.get("/api/v1/ratios", params={"route": "none"}).text) == []
