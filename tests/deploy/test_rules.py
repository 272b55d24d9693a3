"""Prometheus rules and config, Alertmanager config: the real tools check them.

promtool and amtool come from Debian's ``prometheus`` and ``prometheus-alertmanager``
(``scripts/system-packages``, run by ``make test``): a missing binary fails, never skips.
"""

from __future__ import annotations

import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tests.deploy import (
    DEPLOY,
    PROMETHEUS_SERIES,
    RULE_FILES,
    alert_rules,
    documented_metrics,
    load_yaml,
    metric_names,
    rated,
    recording_rules,
    selectors,
)
from tests.fixtures.process import free_port, serving
from tests.helpers import wait_for

PROM = DEPLOY / "prometheus"
ALERTMANAGER_YML = DEPLOY / "alertmanager" / "alertmanager.yml"
SPECWATCH_RULES, VLLM_RULES = RULE_FILES
UNIT_TESTS = sorted((PROM / "tests").glob("*.yml"))

# vLLM V1 spec-decode counters as exposed on /metrics (engine-telemetry reference, 1.1:
# vllm/v1/spec_decode/metrics.py, class SpecDecodingProm), labels model_name and engine.
VLLM_COUNTERS = {
    "vllm:spec_decode_num_drafts_total": {"model_name", "engine"},
    "vllm:spec_decode_num_draft_tokens_total": {"model_name", "engine"},
    "vllm:spec_decode_num_accepted_tokens_total": {"model_name", "engine"},
    "vllm:spec_decode_num_accepted_tokens_per_pos_total": {"model_name", "engine", "position"},
}
SEVERITIES = {"critical", "warning", "info"}
# Recording-rule levels and the labels they keep ("pair" as in docs/metrics.md).
LEVELS = {
    "route": {"route"},
    "pair": {"route", "target_model", "draft_model"},
    "job": {"job"},
    "sink_outcome": {"sink", "outcome"},
    "model_name": {"model_name"},
    "model_name_position": {"model_name", "position"},
}


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is not installed: run scripts/system-packages (make test does)"
    return path


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, check=False)


def rules_of(path: Path) -> list[dict]:
    return [rule for group in load_yaml(path)["groups"] for rule in group["rules"]]


# --- the tools ---------------------------------------------------------------------------

@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_promtool_check_rules(path: Path) -> None:
    res = run(tool("promtool"), "check", "rules", path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"SUCCESS: {len(rules_of(path))} rules found" in res.stdout


@pytest.mark.parametrize("path", UNIT_TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests(path: Path) -> None:
    res = run(tool("promtool"), "test", "rules", path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


def test_promtool_check_config(tmp_path: Path) -> None:
    """The shipped prometheus.yml, rule paths resolved next to it as in the container.

    promtool insists that the scrape token file exists; in the container the entrypoint
    writes it. A copy points it at a file of the test instead, nothing else changes.
    """
    shutil.copytree(PROM, tmp_path / "prometheus")
    cfg = tmp_path / "prometheus" / "prometheus.yml"
    text = cfg.read_text(encoding="utf-8")
    token_path = load_yaml(cfg)["scrape_configs"][0]["authorization"]["credentials_file"]
    token = tmp_path / "api_token"
    token.write_text("t0k", encoding="utf-8")
    cfg.write_text(text.replace(token_path, str(token)), encoding="utf-8")
    res = run(tool("promtool"), "check", "config", cfg)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS: 2 rule files found" in res.stdout
    assert f"{len(rules_of(SPECWATCH_RULES))} rules found" in res.stdout
    assert f"{len(rules_of(VLLM_RULES))} rules found" in res.stdout


def test_prometheus_config_loads_both_rule_files() -> None:
    cfg = load_yaml(PROM / "prometheus.yml")
    assert {(PROM / p).resolve() for p in cfg["rule_files"]} == {p.resolve() for p in RULE_FILES}
    jobs = {job["job_name"]: job for job in cfg["scrape_configs"]}
    assert jobs["specwatch"]["authorization"]["type"] == "Bearer"
    assert jobs["specwatch"]["authorization"]["credentials_file"].startswith("/")


def test_amtool_check_config() -> None:
    res = run(tool("amtool"), "check-config", ALERTMANAGER_YML)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


@pytest.mark.parametrize(("labels", "receivers"), [
    # specwatch's own alerts: it delivers them itself, Alertmanager only holds them
    ({"alertname": "below_breakeven", "route": "code", "severity": "warning"}, "discard"),
    ({"alertname": "speculation_inactive", "route": "code", "severity": "critical"},
     "discard"),
    # Prometheus's: critical pages and goes to Slack, the rest to Slack
    ({"alertname": "SpecwatchDown", "severity": "critical"}, "ops-pagerduty,ops-slack"),
    ({"alertname": "SpecwatchSinkBroken", "sink": "slack", "severity": "critical"},
     "ops-pagerduty,ops-slack"),
    ({"alertname": "SpecwatchOutboxBacklog", "sink": "slack", "severity": "warning"},
     "ops-slack"),
    ({"alertname": "VllmSpecDecodeAcceptanceLow", "model_name": "m", "severity": "warning"},
     "ops-slack"),
])
def test_alertmanager_routing(labels: dict[str, str], receivers: str) -> None:
    res = run(tool("amtool"), "config", "routes", "test", f"--config.file={ALERTMANAGER_YML}",
              *(f"{k}={v}" for k, v in labels.items()))
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip() == receivers


def test_every_prometheus_alert_reaches_a_receiver() -> None:
    """No alert of the rule files falls into the discard route meant for specwatch's own."""
    for name, rule in alert_rules().items():
        res = run(tool("amtool"), "config", "routes", "test",
                  f"--config.file={ALERTMANAGER_YML}", f"alertname={name}",
                  f"severity={rule['labels']['severity']}")
        assert res.returncode == 0, res.stderr
        assert "discard" not in res.stdout and "ops-slack" in res.stdout, (name, res.stdout)


def test_alertmanager_inhibits_the_reminder_while_specwatch_alert_is_there(
        tmp_path: Path) -> None:
    """A real Alertmanager with the shipped config: specwatch's own below_breakeven for a
    pair mutes Prometheus's SpecwatchBelowBreakeven for the same pair, not another route's."""
    binary = tool("prometheus-alertmanager")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "am.log"
    with serving([binary, f"--config.file={ALERTMANAGER_YML}",
                  f"--storage.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                  "--cluster.listen-address=", f"--web.external-url={url}"], url, log):
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        pair = {"target_model": "llama-70b", "draft_model": "llama-1b", "severity": "warning"}
        alerts = [
            # as specwatch's Alertmanager sink posts it (alerts/sinks/alertmanager.py)
            {"labels": {"alertname": "below_breakeven", "route": "writing", **pair,
                        "num_speculative_tokens": "5"}},
            # as Prometheus posts the rule alert (segment labels + job/instance)
            {"labels": {"alertname": "SpecwatchBelowBreakeven", "route": "writing", **pair,
                        "job": "specwatch", "instance": "specwatch:9464",
                        "recommendation": "off"}},
            {"labels": {"alertname": "SpecwatchBelowBreakeven", "route": "chat", **pair,
                        "job": "specwatch", "instance": "specwatch:9464",
                        "recommendation": "off"}},
        ]
        for a in alerts:
            a["startsAt"] = now
        assert httpx.post(f"{url}/api/v2/alerts", json=alerts, timeout=5).status_code == 200

        def states() -> dict[tuple[str, str], str]:
            got = httpx.get(f"{url}/api/v2/alerts", timeout=5).json()
            return {(a["labels"]["alertname"], a["labels"]["route"]): a["status"]["state"]
                    for a in got}

        want = {("below_breakeven", "writing"): "active",
                ("SpecwatchBelowBreakeven", "writing"): "suppressed",
                ("SpecwatchBelowBreakeven", "chat"): "active"}
        wait_for(lambda: states() == want, timeout=20, what=f"inhibition states {want}")


# --- what the rules say ------------------------------------------------------------------

def test_specwatch_rules_read_only_contract_metrics() -> None:
    """Every name is in docs/metrics.md, a recording rule of ours, or Prometheus's ``up``;
    every label matched exists on the metric; rate()/increase() only on counters."""
    documented = documented_metrics()
    known = {**documented, **recording_rules(), **PROMETHEUS_SERIES}
    for rule in rules_of(SPECWATCH_RULES):
        expr = rule["expr"]
        unknown = metric_names(expr) - set(known)
        assert not unknown, (rule.get("record") or rule.get("alert"), unknown)
        for name, labels in selectors(expr):
            allowed = known[name] | {"job", "instance"}
            assert labels <= allowed, (expr, name, labels - allowed)
        for name in rated(expr):
            assert name.endswith("_total"), f"rate of a gauge {name} in {expr}"


def test_vllm_rules_read_only_vllm_spec_decode_counters() -> None:
    own = recording_rules()
    for rule in rules_of(VLLM_RULES):
        expr = rule["expr"]
        names = metric_names(expr)
        assert names <= set(VLLM_COUNTERS) | set(own), names - set(VLLM_COUNTERS) - set(own)
        for name, labels in selectors(expr):
            if name in VLLM_COUNTERS:
                assert labels <= VLLM_COUNTERS[name] | {"job", "instance"}
        for name in rated(expr):
            assert name in VLLM_COUNTERS, name
        # fleet-wide per model: the data-parallel engine label is always summed away
        if "record" in rule:
            assert "engine" not in own[rule["record"]]


def test_recording_rule_names_follow_level_metric_operations() -> None:
    """level:metric:operations, the level naming exactly the labels the rule keeps."""
    for name, labels in recording_rules().items():
        level, metric, ops = name.split(":")
        assert metric and ops, name
        assert not metric.endswith("_total"), name  # _total is dropped once rated
        assert labels == LEVELS[level], (name, labels)


def test_alert_rules_are_complete() -> None:
    rules = alert_rules()
    assert {"SpecwatchDown", "SpecwatchEventLagHigh", "SpecwatchSinkBroken",
            "SpecwatchOutboxBacklog", "SpecwatchBelowBreakeven",
            "VllmSpecDecodeAcceptanceLow"} <= set(rules)
    for name, rule in rules.items():
        assert name[0].isupper() and "_" not in name, name  # CamelCase, unlike specwatch's
        assert rule.get("for"), f"{name} has no for:"
        assert rule["labels"]["severity"] in SEVERITIES, name
        assert rule["annotations"]["summary"].strip(), name
        assert rule["annotations"]["description"].strip(), name


def test_vllm_fallback_threshold_and_hold() -> None:
    rule = alert_rules()["VllmSpecDecodeAcceptanceLow"]
    assert rule["for"] == "15m"
    assert rule["expr"].strip() == "model_name:vllm_spec_decode_acceptance:ratio_rate5m < 0.40"
    assert rule["expr"].split(" < ")[0] in recording_rules()


def test_below_breakeven_reads_the_recommendation() -> None:
    rule = alert_rules()["SpecwatchBelowBreakeven"]
    assert rule["for"] == "30m"
    assert rule["expr"].strip() == 'specwatch_recommendation{recommendation="off"} == 1'


def test_unit_tests_cover_every_alert_firing_and_silent() -> None:
    """Each alert has a promtool case where it fires and one where it must stay silent."""
    fires: set[str] = set()
    silent: set[str] = set()
    covered_files: set[Path] = set()
    for path in UNIT_TESTS:
        doc = load_yaml(path)
        covered_files |= {(path.parent / f).resolve() for f in doc["rule_files"]}
        for case in doc["tests"]:
            for check in case.get("alert_rule_test", []):
                (fires if check.get("exp_alerts") else silent).add(check["alertname"])
    assert covered_files == {p.resolve() for p in RULE_FILES}
    assert set(alert_rules()) <= fires, set(alert_rules()) - fires
    assert set(alert_rules()) <= silent, set(alert_rules()) - silent
