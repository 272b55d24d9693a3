"""Configuration: one file plus environment, rejected early with the key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.config import load_config, parse_duration
from monitor.config_env import store_url
from monitor.exceptions import ConfigError


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_yaml_and_toml_give_the_same_config(tmp_path: Path) -> None:
    y = write(tmp_path, "c.yaml", "kafka:\n  topic: t1\ningest:\n  allowed_lateness: 5m\n")
    t = write(tmp_path, "c.toml", '[kafka]\ntopic = "t1"\n[ingest]\nallowed_lateness = "5m"\n')
    assert load_config(y, env={}) == load_config(t, env={})
    assert load_config(y, env={}).ingest.allowed_lateness == 300.0


@pytest.mark.parametrize(
    ("text", "path", "what"),
    [
        ("kafka:\n  topik: x\n", "kafka.topik", "unknown key"),
        ("ingest:\n  allowed_lateness: 5 parsecs\n", "ingest.allowed_lateness", "invalid duration"),
        ("kafka:\n  partitions: 0\n", "kafka.partitions", "greater than or equal"),
        ("kafka:\n  auto_offset_reset: sometimes\n", "kafka.auto_offset_reset", "earliest"),
        ("stor:\n  url: x\n", "stor", "unknown key"),
        ("ingest:\n  allowed_lateness: 10m\n  dedup_horizon: 1m\n", "ingest", "dedup_horizon"),
        ("alerting:\n  routing:\n    teams: {}\n", "alerting.routing.teams", "slack"),
        ("alerting:\n  routing:\n    slack: {rules: [acceptance_dorp]}\n",
         "alerting.routing.slack.rules", "unknown rule 'acceptance_dorp'"),
        ("alerting:\n  routing:\n    slack: {severities: [page]}\n",
         "alerting.routing.slack.severities.0", "critical"),
        ("alerting:\n  lifecycle:\n    keep_firing_for: soon\n",
         "alerting.lifecycle.keep_firing_for", "invalid duration"),
        ("alerting:\n  lifecycle:\n    group_by: [rule]\n", "alerting.lifecycle.group_by",
         "must include 'route'"),
        ("alerting:\n  route_overrides:\n    - {routes: [], routing: {}}\n",
         "alerting.route_overrides.0.routes", "at least 1"),
    ],
)
def test_bad_keys_and_values_name_the_key_path(
    tmp_path: Path, text: str, path: str, what: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "c.yaml", text), env={})
    assert f"config error at {path}" in str(err.value)
    assert what in str(err.value)


def test_environment_overrides_urls(tmp_path: Path) -> None:
    cfg = load_config(
        write(tmp_path, "c.yaml", "store:\n  url: sqlite:///file.db\n"),
        env={"SPECWATCH_DB_URL": "postgresql://u:secret@db/x",
             "SPECWATCH_KAFKA_BOOTSTRAP": "k:9092"},
    )
    assert cfg.store.url == "postgresql://u:secret@db/x"
    assert cfg.kafka.bootstrap_servers == "k:9092"


def test_config_is_frozen() -> None:
    cfg = load_config(None, env={})
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen error type is internal
        cfg.kafka.topic = "x"  # type: ignore[misc]


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml", env={})
    with pytest.raises(ConfigError, match="cannot parse"):
        load_config(write(tmp_path, "c.toml", "[kafka\n"), env={})
    with pytest.raises(ConfigError, match="mapping"):
        load_config(write(tmp_path, "c.yaml", "- a\n- b\n"), env={})


@pytest.mark.parametrize("bad", ["", "5x", "-3", True, -1, "m5"])
def test_bad_durations(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_shipped_deployment_config_loads() -> None:
    cfg = load_config(Path(__file__).parents[2] / "deploy" / "specwatch.yaml", env={})
    assert cfg.kafka.partitions == 12
    assert cfg.detection.cost_models[0].c == 0.05
    alerting = cfg.alerting
    assert not alerting.filter_for("pagerduty", "batch-eu").admits("below_breakeven", "warning")
    assert alerting.filter_for("pagerduty", "code").admits("below_breakeven", "warning")
    assert not alerting.filter_for("pagerduty", "code").admits("acceptance_rise", "info")
    assert alerting.filter_for("webhook", "code").admits("acceptance_rise", "info")
    assert alerting.lifecycle.timing("memory_contention") == (120.0, 600.0, 14400.0)


@pytest.mark.parametrize("env", [{}, {"SPECWATCH_DB_URL": ""},
                                 {"SPECWATCH_DB_URL": "postgresql+psycopg://h/db"},
                                 {"SPECWATCH_KAFKA_BOOTSTRAP": "k:9092"}])
@pytest.mark.parametrize("given", [None, "", "sqlite:///given.db"])
def test_the_store_url_without_a_file_is_load_configs(env: dict[str, str],
                                                      given: str | None) -> None:
    """`specwatch ratios` without --config reads its URL through config_env.store_url and
    no GPU-hour price: what load_config(None) gives, as the command line calls it."""
    overrides = {"store": {"url": given}} if given else {}
    config = load_config(None, env=env, overrides=overrides)
    assert store_url(env, given) == config.store.url
    assert config.cost.price_per_gpu_hour is None
