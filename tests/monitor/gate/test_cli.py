"""``specwatch gate`` on a real SQLite database: the verdicts and their exit codes (0 pass,
1 fail, 3 insufficient data, 2 usage error), as JSON and as a table."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import pytest

from monitor.cli import _config
from monitor.cli_gate import register
from monitor.exceptions import SpecwatchError
from tests.monitor.gate.conftest import CHANGE_ID


def gate(*argv: str) -> int:
    """``specwatch gate ...`` as ``monitor.cli.main`` runs a command: argparse errors exit 2,
    a :class:`SpecwatchError` is one ``specwatch: ...`` line and its exit code."""
    parser = argparse.ArgumentParser(prog="specwatch")
    sub = parser.add_subparsers(dest="command", required=True)

    def with_config(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", metavar="FILE")
        p.add_argument("--db", metavar="URL")

    register(sub, with_config, _config)
    args = parser.parse_args(["gate", *argv])
    try:
        return int(args.func(args))
    except SpecwatchError as e:
        print(f"specwatch: {e}", file=sys.stderr)
        return e.exit_code


def _json(capsys: pytest.CaptureFixture[str], db: str, *args: str) -> tuple[int, dict]:
    code = gate("--db", db, "--format", "json", *args)
    return code, json.loads(capsys.readouterr().out)


def test_pass_exits_0(gate_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = _json(capsys, gate_db, "--experiment", "faster-draft")
    assert code == 0 and doc["verdict"] == "pass", doc["reason"]
    assert doc["gate"] == {"kind": "experiment", "name": "faster-draft", "since": None,
                           "until": None}
    assert doc["sides"]["baseline"]["requests"] == 240_000
    assert doc["efficiency"]["interval"][0] > -0.02
    assert [r["route"] for r in doc["routes"]] == ["code-assistant", "json-tools"]


def test_fail_exits_1_and_names_json_tools(gate_db: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = _json(capsys, gate_db, "--experiment", "broken-tools")
    assert code == 1 and doc["verdict"] == "fail"
    assert doc["failures"] == [{"route": "json-tools", "metric": "tool_calls_valid_rate"}]
    assert gate("--db", gate_db, "--experiment", "broken-tools") == 1
    table = capsys.readouterr().out
    assert table.startswith("gate experiment broken-tools: FAIL\n")
    assert "  fail: json-tools tool_calls_valid_rate" in table


def test_insufficient_exits_3_with_the_requests_needed(gate_db: str,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    code, doc = _json(capsys, gate_db, "--experiment", "small")
    assert code == 3 and doc["verdict"] == "insufficient_data"
    need = doc["requests_needed"]
    assert need["baseline"] > 0 and need["candidate"] > 0
    assert f"{need['baseline']:,} more baseline" in doc["reason"]


def test_since_and_until_cut_the_hours(gate_db: str, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    from tests.monitor.store.helpers import T0, at

    code, doc = _json(capsys, gate_db, "--experiment", "faster-draft", "--since",
                      at(T0 + 3600).isoformat(), "--until", at(T0 + 7200).isoformat())
    assert doc["sides"]["baseline"]["requests"] == 120_000
    assert doc["gate"]["since"] == "2026-11-02T23:00:00Z"
    assert code in (0, 3)


def test_a_change_fails_on_its_error_rate(gate_db: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = _json(capsys, gate_db, "--change", CHANGE_ID)
    assert code == 1, doc["reason"]
    assert {"route": "chat", "metric": "error_rate"} in doc["failures"]
    assert doc["gate"]["kind"] == "change" and doc["gate"]["change"]["route"] == "chat"
    assert doc["gate"]["change"]["current"]["draft_revision"] == "d2"
    assert doc["sides"]["baseline"]["requests"] == 2400


@pytest.mark.parametrize("args", [
    ["--experiment", "nope"],
    ["--change", "nope"],
    ["--experiment", "small", "--since", "2026-11-03T00:00:00Z",
     "--until", "2026-11-02T00:00:00Z"],
])
def test_unknown_names_and_bad_ranges_exit_2(gate_db: str, args: Sequence[str],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert gate("--db", gate_db, *args) == 2
    err = capsys.readouterr().err
    assert err.startswith("specwatch: ") and err.count("\n") == 1


@pytest.mark.parametrize("args", [
    [],  # neither --experiment nor --change
    ["--experiment", "a", "--change", "b"],
    ["--experiment", "a", "--since", "yesterday"],
    ["--experiment", "a", "--format", "xml"],
])
def test_usage_errors_exit_2(gate_db: str, args: Sequence[str]) -> None:
    with pytest.raises(SystemExit) as e:
        gate("--db", gate_db, *args)
    assert e.value.code == 2


def test_an_unmigrated_database_is_one_line(tmp_path: object,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert gate("--db", f"sqlite:///{tmp_path}/none.db", "--experiment", "x") == 2
    assert capsys.readouterr().err.startswith("specwatch: ")
