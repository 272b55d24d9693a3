"""The provisioned Grafana dashboard against the metric contract and the provisioning."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from tests.deploy import (
    DEPLOY,
    PROMETHEUS_SERIES,
    documented_metrics,
    load_yaml,
    metric_names,
    rated,
    recording_rules,
    selectors,
)

GRAFANA = DEPLOY / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "specwatch.json"
DATASOURCES = GRAFANA / "provisioning" / "datasources" / "prometheus.yml"
PROVIDERS = GRAFANA / "provisioning" / "dashboards" / "specwatch.yml"
ROUTE_MATCH = 'route=~"$route"'


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def prometheus_ds() -> dict:
    [ds] = [d for d in load_yaml(DATASOURCES)["datasources"] if d["type"] == "prometheus"]
    return ds


def all_panels(dashboard: dict) -> Iterator[dict]:
    for p in dashboard["panels"]:
        yield p
        yield from p.get("panels", [])  # a collapsed row keeps its panels inside


def targets(dashboard: dict) -> Iterator[tuple[dict, dict]]:
    for p in all_panels(dashboard):
        for t in p.get("targets", []):
            yield p, t


def known_series() -> dict[str, frozenset[str]]:
    return {**documented_metrics(), **recording_rules(), **PROMETHEUS_SERIES}


def grafana_free(expr: str) -> str:
    """Grafana's interval variables replaced as Grafana would, so the PromQL can be read."""
    return expr.replace("$__rate_interval", "1m").replace("$__interval", "1m").replace(
        "$__range", "1h")


def test_identity(dashboard: dict) -> None:
    assert dashboard["uid"] == "specwatch-overview"
    assert dashboard["id"] is None  # provisioning assigns it
    assert dashboard["schemaVersion"] >= 39
    assert dashboard["title"]
    assert dashboard["editable"] is False  # provisioned from the repo; edits would be lost


def test_every_query_uses_the_provisioned_prometheus(dashboard: dict,
                                                     prometheus_ds: dict) -> None:
    want = {"type": "prometheus", "uid": prometheus_ds["uid"]}
    n = 0
    for p in all_panels(dashboard):
        if p["type"] == "row":
            continue
        assert p["datasource"] == want, p["title"]
        for t in p["targets"]:
            assert t["datasource"] == want, (p["title"], t["refId"])
            n += 1
    assert n >= 20
    for var in dashboard["templating"]["list"]:
        assert var["datasource"] == want, var["name"]


def test_datasource_provisioning(prometheus_ds: dict) -> None:
    doc = load_yaml(DATASOURCES)
    assert doc["apiVersion"] == 1
    assert prometheus_ds["url"] == "http://prometheus:9090"
    assert prometheus_ds["access"] == "proxy"
    assert prometheus_ds["isDefault"] is True
    uids = [d["uid"] for d in doc["datasources"]]
    assert len(uids) == len(set(uids))
    # Grafana's $__rate_interval is 4x this: it must be the scrape interval
    prom = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    assert prometheus_ds["jsonData"]["timeInterval"] == prom["global"]["scrape_interval"]


def test_dashboard_provider_points_at_the_dashboards(dashboard: dict) -> None:
    [provider] = load_yaml(PROVIDERS)["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == "/etc/grafana/dashboards"  # compose mounts it there
    assert provider["allowUiUpdates"] is False


def test_route_variable(dashboard: dict) -> None:
    [var] = [v for v in dashboard["templating"]["list"] if v["name"] == "route"]
    assert var["type"] == "query"
    assert var["definition"] == "label_values(specwatch_acceptance_ratio, route)"
    assert var["query"]["query"] == var["definition"]
    assert var["multi"] and var["includeAll"]  # a repeated row needs a multi-value variable


def test_expressions_read_only_contract_metrics(dashboard: dict) -> None:
    """Every metric name in a query is in docs/metrics.md, one of our recording rules, or
    a series Prometheus writes itself (up, ALERTS)."""
    known = known_series()
    seen: set[str] = set()
    for p, t in targets(dashboard):
        expr = grafana_free(t["expr"])
        names = metric_names(expr)
        assert names, (p["title"], expr)
        assert names <= set(known), (p["title"], names - set(known))
        seen |= names
    # the panels the dashboard exists for
    assert {"specwatch_acceptance_ratio", "specwatch_acceptance_baseline_ratio",
            "specwatch_breakeven_cutoff_ratio", "specwatch_ttft_seconds",
            "specwatch_decode_throughput_tokens_per_second", "specwatch_recommendation",
            "specwatch_alerts_firing", "specwatch_event_time_lag_seconds",
            "specwatch_notifications_total"} <= seen


def test_label_matchers_and_legends_exist_on_the_metrics(dashboard: dict) -> None:
    known = known_series()
    for p, t in targets(dashboard):
        expr = grafana_free(t["expr"])
        available: set[str] = set()
        for name, labels in selectors(expr):
            assert labels <= known[name], (p["title"], name, labels - known[name])
            available |= known[name]
        legend = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", t.get("legendFormat", "")))
        assert legend <= available, (p["title"], legend - available)


def test_rate_only_on_counters(dashboard: dict) -> None:
    for p, t in targets(dashboard):
        for name in rated(grafana_free(t["expr"])):
            assert name.endswith("_total"), (p["title"], name)


def test_route_rows_repeat_per_route_and_filter_on_it(dashboard: dict) -> None:
    """The repeated row's panels: acceptance with baseline and break-even beside TTFT p50/p99
    and decode throughput, the recommendation and the route's alerts; every query on a
    metric that has a route label is narrowed to the row's route."""
    panels = dashboard["panels"]
    [start] = [i for i, p in enumerate(panels) if p.get("repeat") == "route"]
    assert panels[start]["type"] == "row" and "$route" in panels[start]["title"]
    end = next(i for i in range(start + 1, len(panels)) if panels[i]["type"] == "row")
    row = panels[start + 1:end]
    known = known_series()
    exprs = []
    for p in row:
        for t in p["targets"]:
            expr = grafana_free(t["expr"])
            exprs.append(expr)
            for name, labels in selectors(expr):
                if "route" in known[name]:
                    assert "route" in labels and ROUTE_MATCH in expr, (p["title"], expr)
    joined = "\n".join(exprs)
    for needle in ("specwatch_acceptance_ratio{", "specwatch_acceptance_baseline_ratio{",
                   "specwatch_breakeven_cutoff_ratio{", 'quantile="0.5"', 'quantile="0.99"',
                   "specwatch_decode_throughput_tokens_per_second{",
                   "specwatch_recommendation{", "specwatch_alerts_firing{"):
        assert needle in joined, needle
    ttft = [e for e in exprs if "specwatch_ttft_seconds" in e]
    assert {q for e in ttft for q in re.findall(r'quantile="([\d.]+)"', e)} == {"0.5", "0.99"}


def test_acceptance_panel_draws_reference_lines_dashed(dashboard: dict) -> None:
    [panel] = [p for p, t in targets(dashboard) if "specwatch_breakeven_cutoff_ratio" in t["expr"]]
    assert panel["fieldConfig"]["defaults"]["unit"] == "percentunit"
    refs = {t["refId"]: t["expr"] for t in panel["targets"]}
    dashed = {o["matcher"]["options"] for o in panel["fieldConfig"]["overrides"]
              if any(prop["id"] == "custom.lineStyle" for prop in o["properties"])}
    assert {r for r, e in refs.items() if "baseline" in e or "cutoff" in e} == dashed


def test_layout(dashboard: dict) -> None:
    ids = [p["id"] for p in all_panels(dashboard)]
    assert len(ids) == len(set(ids))
    boxes = []
    for p in dashboard["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        for other in boxes:
            o = other["gridPos"]
            overlap = (g["x"] < o["x"] + o["w"] and o["x"] < g["x"] + g["w"]
                       and g["y"] < o["y"] + o["h"] and o["y"] < g["y"] + g["h"])
            assert not overlap, (p["title"], other["title"])
        boxes.append(p)


def test_refids_unique_per_panel(dashboard: dict) -> None:
    for p in all_panels(dashboard):
        refs = [t["refId"] for t in p.get("targets", [])]
        assert len(refs) == len(set(refs)), p["title"]
