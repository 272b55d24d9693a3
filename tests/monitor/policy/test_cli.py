"""``specwatch policy``: hindsight features refused (exit 2, before the database is read), no
data explained, and the formats end to end on a stand-in store."""

from __future__ import annotations

import argparse
import json
import sys

import pytest

import monitor.store.store as store_module
from monitor.cli import _config
from monitor.cli_policy import register
from monitor.exceptions import SpecwatchError
from tests.monitor.policy.records import Slice, records

HINDSIGHT = ("spec.accepted_tokens", "output_tokens", "ttft_ms", "e2e_ms", "status", "outcome",
             "outcome.ok", "itl_ms", "output_hash")


def policy(*argv: str) -> int:
    """``specwatch policy ...`` as ``monitor.cli.main`` runs a command."""
    parser = argparse.ArgumentParser(prog="specwatch")
    sub = parser.add_subparsers(dest="command", required=True)

    def with_config(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", metavar="FILE")
        p.add_argument("--db", metavar="URL")

    register(sub, with_config, _config)
    args = parser.parse_args(["policy", *argv])
    try:
        return int(args.func(args))
    except SpecwatchError as e:
        print(f"specwatch: {e}", file=sys.stderr)
        return e.exit_code


class FakeStore:
    rows: list = []
    calls: list = []

    def __init__(self, url: str) -> None:
        self.url = url

    def __enter__(self) -> FakeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def slice_records(self, since, until, route):
        FakeStore.calls.append((since, until, route))
        return list(FakeStore.rows)


@pytest.fixture
def fake_store(monkeypatch: pytest.MonkeyPatch) -> type[FakeStore]:
    FakeStore.rows, FakeStore.calls = [], []
    monkeypatch.setattr(store_module, "Store", FakeStore)
    return FakeStore


@pytest.mark.parametrize("field", HINDSIGHT)
def test_hindsight_features_exit_2_naming_the_field(
        field: str, fake_store: type[FakeStore], capsys: pytest.CaptureFixture[str]) -> None:
    assert policy("--db", "sqlite:///x.db", "--features", f"tags.lang,{field}") == 2
    err = capsys.readouterr().err
    assert f"--features {field}: {field} is known only after the request ran" in err
    assert fake_store.calls == []  # refused before the store is read


def test_no_rollups_is_a_one_line_usage_error(fake_store: type[FakeStore],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert policy("--db", "sqlite:///x.db", "--route", "code") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no slice rollups in the window" in err
    assert "telemetry v1.1" in err and "policy.enabled" in err
    assert fake_store.calls == [(None, None, "code")]


def test_formats_end_to_end(fake_store: type[FakeStore],
                            capsys: pytest.CaptureFixture[str]) -> None:
    fake_store.rows = records([Slice(tags="lang=py"), Slice(tags="lang=go")], hours=6)
    assert policy("--db", "sqlite:///x.db", "--format", "json", "--features",
                  "tags.lang") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["features"] == ["tags.lang"] and len(doc["slices"]) == 2
    assert policy("--db", "sqlite:///x.db", "--format", "vllm") == 0
    assert json.loads(capsys.readouterr().out)[0]["speculative_config"] is not None
    assert policy("--db", "sqlite:///x.db", "--train-until", "2027-01-15T12:00:00Z") == 0
    assert capsys.readouterr().out.startswith("policy over ")
