"""Which sinks a process has, from the environment and the routing config."""

from __future__ import annotations

import pytest

from alerts.exceptions import AlertError
from alerts.sinks import (
    ENV,
    PAGERDUTY_URL_ENV,
    AlertmanagerSink,
    LogSink,
    PagerDutySink,
    SinkConfigError,
    SlackSink,
    WebhookSink,
    build_sinks,
)
from monitor.config import SINK_NAMES, AlertingConfig
from tests.alerts.sinks import ROUTING_KEY, notification

SLACK = "https://hooks.slack.com/services/T0/B0/s3cr3tT0kenV4lue"
ALL = {
    ENV["slack"]: SLACK,
    ENV["pagerduty"]: ROUTING_KEY,
    ENV["alertmanager"]: "http://am1:9093, http://am2:9093/ ,",
    ENV["webhook"]: "https://hooks.example.test/x",
}


def routing(**enabled: bool) -> AlertingConfig:
    return AlertingConfig.model_validate(
        {"routing": {name: {"enabled": on} for name, on in enabled.items()}})


def test_env_names_cover_the_http_sinks() -> None:
    assert set(ENV) | {"log"} == set(SINK_NAMES)
    assert PAGERDUTY_URL_ENV == "SPECWATCH_PAGERDUTY_URL"


def test_nothing_set_gives_only_the_log_sink() -> None:
    sinks = build_sinks(AlertingConfig(), {})
    assert list(sinks) == ["log"] and isinstance(sinks["log"], LogSink)


def test_everything_set() -> None:
    sinks = build_sinks(AlertingConfig(), ALL, clock=lambda: 0.0)
    assert list(sinks) == ["slack", "pagerduty", "alertmanager", "webhook", "log"]
    assert isinstance(sinks["slack"], SlackSink) and isinstance(sinks["webhook"], WebhookSink)
    assert isinstance(sinks["pagerduty"], PagerDutySink)
    am = sinks["alertmanager"]
    assert isinstance(am, AlertmanagerSink)
    assert [r.url for r in am.requests(notification())] == [
        "http://am1:9093/api/v2/alerts", "http://am2:9093/api/v2/alerts"]
    assert sinks["slack"].name == "slack" and sinks["slack"].min_interval == 1.0
    assert sinks["pagerduty"].min_interval == 0.5


@pytest.mark.parametrize("value", ["", "   ", "\t\n"])
def test_empty_values_leave_a_sink_out(value: str) -> None:
    env = {var: value for var in ENV.values()}
    assert list(build_sinks(AlertingConfig(), env)) == ["log"]


def test_alertmanager_list_needs_one_url() -> None:
    with pytest.raises(SinkConfigError, match=ENV["alertmanager"]):
        build_sinks(AlertingConfig(), {ENV["alertmanager"]: " , ,"})


def test_routing_can_disable_sinks() -> None:
    sinks = build_sinks(routing(slack=False, log=False, webhook=True), ALL)
    assert list(sinks) == ["pagerduty", "alertmanager", "webhook"]


def test_routing_filters_without_enabled_false_keep_the_sink() -> None:
    cfg = AlertingConfig.model_validate({"routing": {"slack": {"severities": ["critical"]}}})
    assert "slack" in build_sinks(cfg, {ENV["slack"]: SLACK})


def test_pagerduty_base_url_override() -> None:
    env = {ENV["pagerduty"]: ROUTING_KEY, PAGERDUTY_URL_ENV: "http://127.0.0.1:8080/"}
    [req] = build_sinks(AlertingConfig(), env)["pagerduty"].requests(notification())  # type: ignore[union-attr]
    assert req.url == "http://127.0.0.1:8080/v2/enqueue"


def test_per_sink_config_is_passed_on() -> None:
    cfg = AlertingConfig.model_validate({"slack": {"min_interval": "2s"},
                                         "pagerduty": {"source": "gpu-fleet"}})
    sinks = build_sinks(cfg, ALL)
    assert sinks["slack"].min_interval == 2.0  # type: ignore[union-attr]
    [req] = sinks["pagerduty"].requests(notification())  # type: ignore[union-attr]
    assert b'"source":"gpu-fleet"' in req.body


BAD_URLS = ["hooks.slack.com/services/T0/B0/s3cr3tXYZ", "ftp://h/s3cr3tXYZ",
            "https:///s3cr3tXYZ", "http://h:port/s3cr3tXYZ", "https://h/s3cr3t XYZ",
            "http://[::1/s3cr3tXYZ", "javascript:s3cr3tXYZ"]


@pytest.mark.parametrize("sink", ["slack", "alertmanager", "webhook"])
@pytest.mark.parametrize("bad", BAD_URLS)
def test_bad_urls_name_the_variable_never_the_value(sink: str, bad: str) -> None:
    env = {ENV[sink]: bad if sink != "alertmanager" else f"http://ok:9093,{bad}"}
    with pytest.raises(SinkConfigError) as e:
        build_sinks(AlertingConfig(), env)
    assert ENV[sink] in str(e.value)
    assert "s3cr3t" not in str(e.value) and "s3cr3t" not in repr(e.value)
    assert e.value.__cause__ is None and "s3cr3t" not in str(e.value.__context__)
    assert isinstance(e.value, AlertError)


def test_bad_pagerduty_values() -> None:
    with pytest.raises(SinkConfigError, match=PAGERDUTY_URL_ENV) as e:
        build_sinks(AlertingConfig(), {ENV["pagerduty"]: ROUTING_KEY,
                                       PAGERDUTY_URL_ENV: "events s3cr3t"})
    assert "s3cr3t" not in str(e.value)
    with pytest.raises(SinkConfigError, match=ENV["pagerduty"]) as e:
        build_sinks(AlertingConfig(), {ENV["pagerduty"]: "s3cr3t key"})
    assert "s3cr3t" not in str(e.value)


def test_a_disabled_sink_is_not_validated() -> None:
    assert "slack" not in build_sinks(routing(slack=False), {ENV["slack"]: "not a url"})
