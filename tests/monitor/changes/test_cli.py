"""``specwatch changes``: three changes (worse, better, same) as JSON and as a table, with
the filters, on SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest

from monitor.cli import main
from monitor.store.store import Store
from tests.monitor.changes.traffic import AT, THREE, three_changes
from tests.monitor.store.helpers import at

JSON_KEYS = {"change_id", "route", "temperature", "at", "kind", "summary", "previous",
             "current", "changed", "live", "metrics", "verdict", "reason", "before", "after"}
METRIC_KEYS = {"verdict", "before", "after", "change", "interval", "requests_before",
               "requests_after", "direction_bad"}


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["changes", *args]) == 0
    return capsys.readouterr().out


def test_json_has_each_change_with_its_verdicts(store: Store, migrated_url: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    three_changes(store)
    # the window is 6 h by default: the sides hold the two hours there are
    out = _run(capsys, "--db", migrated_url, "--format", "json")
    doc = json.loads(out)
    assert [(c["route"], c["verdict"]) for c in doc] == list(THREE.items())
    chat = doc[0]
    assert set(chat) == JSON_KEYS and chat["at"] == "2026-11-03T00:00:17.500000Z"
    assert chat["kind"] == "draft_drift" and chat["changed"] == {"target_revision": ["t1", "t2"]}
    assert chat["previous"]["target_revision"] == "t1" and chat["live"]["state"] == "worse"
    acc = chat["metrics"]["acceptance"]
    assert METRIC_KEYS <= set(acc) and acc["verdict"] == "worse" and acc["live"] == "worse"
    assert acc["interval"][1] < 0 and acc["drafted_tokens_before"] > 0
    assert acc["requests_before"] == acc["requests_after"] == 2400
    assert doc[1]["metrics"]["acceptance"]["verdict"] == "better"
    assert doc[2]["metrics"]["acceptance"]["verdict"] == "same"
    assert len(out.splitlines()) == 5  # one change per line between the brackets


def test_filters_and_the_table(store: Store, migrated_url: str,
                               capsys: pytest.CaptureFixture[str]) -> None:
    three_changes(store)
    only = json.loads(_run(capsys, "--db", migrated_url, "--format", "json", "--route", "code"))
    assert [c["route"] for c in only] == ["code"]
    later = json.loads(_run(capsys, "--db", migrated_url, "--format", "json",
                            "--since", at(AT + 30).isoformat()))
    assert [c["route"] for c in later] == ["code", "docs"]

    table = _run(capsys, "--db", migrated_url, "--route", "chat")
    lines = table.splitlines()
    assert lines[0] == ("2026-11-03 00:00:17Z  chat  draft_drift  target t1 -> t2, draft d1 "
                        "unchanged (draft drift)  WORSE")
    acc = lines[1]
    assert acc.startswith("    acceptance ") and "0.44" in acc and " -> 0.3" in acc
    assert " worse " in acc and "live: worse" in acc and "n=2,400/2,400" in acc
    assert "%, " in acc and "[" in acc  # the interval
    assert [ln.split()[0] for ln in lines[1:9]] == [
        "acceptance", "mean", "p50", "p50", "p99", "p50", "p99", "error"]
    assert lines[9].startswith("    -> worse: acceptance 0.4")


def test_no_changes(store: Store, migrated_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(capsys, "--db", migrated_url) == "no changes\n"
    assert _run(capsys, "--db", migrated_url, "--format", "json") == "[]\n"


def test_an_unmigrated_database_is_one_line(tmp_path: object,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["changes", "--db", f"sqlite:///{tmp_path}/none.db"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specwatch: ") and "specwatch db upgrade" in err


def test_hostile_names_are_escaped_in_the_table_and_kept_in_json(
        store: Store, migrated_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.monitor.changes.traffic import OLD, change, commit, setup

    route = "evil\x1b[2J\u202eroute\x00"
    commit(store, [], [change("h1", AT, OLD, setup(target_revision="t2\x1b]0;x\x07"),
                              route=route)])
    table = _run(capsys, "--db", migrated_url)
    assert "\x1b" not in table and "\u202e" not in table and "\x00" not in table
    assert "evil\\x1b[2J\\u202eroute\\x00" in table
    (doc,) = json.loads(_run(capsys, "--db", migrated_url, "--format", "json"))
    assert doc["route"] == route and doc["verdict"] == "insufficient_data"
    assert doc["changed"]["target_revision"] == ["t1", "t2\x1b]0;x\x07"]
