"""Tests of the deployment files (compose, Prometheus rules, Alertmanager, Grafana).

Shared here: the metric contract read from ``docs/metrics.md`` and a small PromQL reader
that pulls metric names, label matchers and ``rate()`` arguments out of an expression, so
the dashboard and the rules can be checked against the contract.

>>> sorted(metric_names('sum by (route) (rate(a_total{route=~"$route"}[5m])) / b:c:d > 0'))
['a_total', 'b:c:d']
>>> [(name, sorted(labels)) for name, labels in selectors('x{route=~"$r", quantile="0.5"} / y')]
[('x', ['quantile', 'route']), ('y', [])]
>>> rated('rate(a_total[5m]) + increase(b[$__rate_interval])')
['a_total', 'b']
>>> sorted(by_labels('sum by (route, sink) (rate(x[5m])) / on (route) y'))
['route', 'sink']
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
METRICS_DOC = REPO / "docs" / "metrics.md"
RULE_FILES = (DEPLOY / "prometheus" / "rules" / "specwatch.rules.yml",
              DEPLOY / "prometheus" / "rules" / "vllm.rules.yml")

# Labels Prometheus attaches to every scraped series.
TARGET_LABELS = frozenset({"job", "instance"})
# Series Prometheus itself writes (ALERTS also carries each alert's own labels).
PROMETHEUS_SERIES = {"up": TARGET_LABELS,
                     "ALERTS": TARGET_LABELS | {"alertname", "alertstate", "severity"}}

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
             "group_left", "group_right", "inf", "nan", "Inf", "NaN", "atan2"}


def _strip(expr: str) -> str:
    """The expression without string literals, range/subquery brackets and the label lists
    of grouping modifiers, which hold label names, not metric names."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    return re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1",
                  expr)


def metric_names(expr: str) -> set[str]:
    """Metric (and recording rule) names an expression reads."""
    names = set()
    stripped = _strip(expr)
    for m in re.finditer(rf"(?<![\w.:$]){_NAME}", stripped):
        if m.group() in _KEYWORDS or re.match(r"\s*(\(|by\b|without\b)", stripped[m.end():]):
            continue  # a keyword, or a function / aggregation call
        names.add(m.group())
    return names


def selectors(expr: str) -> list[tuple[str, set[str]]]:
    """(metric name, label names matched) for each metric selector in the expression."""
    out = []
    no_strings = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    for m in re.finditer(rf"(?<![\w.:$])({_NAME})\s*(\{{[^}}]*\}})?", no_strings):
        name = m.group(1)
        if name not in metric_names(expr):
            continue
        labels = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", m.group(2) or ""))
        out.append((name, labels))
    return out


def rated(expr: str) -> list[str]:
    """Names of the series that rate(), irate() and increase() are applied to."""
    return re.findall(rf"\b(?:rate|irate|increase)\s*\(\s*({_NAME})", expr)


def by_labels(expr: str) -> set[str]:
    """Labels kept by the first ``by (...)`` of an expression: a recording rule's labels."""
    m = re.search(r"\bby\s*\(([^)]*)\)", expr)
    return {x.strip() for x in m.group(1).split(",") if x.strip()} if m else set()


@cache
def documented_metrics() -> dict[str, frozenset[str]]:
    """Metric name -> label names (target labels included), from docs/metrics.md."""
    text = METRICS_DOC.read_text(encoding="utf-8")
    segment = _label_list(re.search(r"Segment labels are\s+`([^`]+)`", text).group(1))
    pair = _label_list(re.search(r"pair labels are\s+`([^`]+)`", text).group(1))
    out: dict[str, frozenset[str]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[0].startswith("`"):
            continue
        spec = re.sub(r"\([^)]*\)", "", cells[2])  # drop value lists: (`ok`, `error`)
        labels: set[str] = set()
        if re.search(r"\bsegment\b", spec):
            labels |= segment
        if re.search(r"\bpair\b", spec):
            labels |= pair
        for group in re.findall(r"`([^`]+)`", spec):
            labels |= _label_list(group)
        for name in re.findall(r"`([^`]+)`", cells[0]):
            out[name] = frozenset(labels | TARGET_LABELS)
    return out


def _label_list(text: str) -> set[str]:
    return {x.strip() for x in text.split(",") if x.strip()}


def load_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@cache
def recording_rules() -> dict[str, frozenset[str]]:
    """Recording rule name -> the labels it keeps, over both rule files."""
    out: dict[str, frozenset[str]] = {}
    for path in RULE_FILES:
        for group in load_yaml(path)["groups"]:
            for rule in group["rules"]:
                if "record" in rule:
                    out[rule["record"]] = frozenset(by_labels(rule["expr"]))
    return out


def alert_rules() -> dict[str, dict]:
    """Alert name -> rule, over both rule files."""
    return {rule["alert"]: rule
            for path in RULE_FILES
            for group in load_yaml(path)["groups"]
            for rule in group["rules"] if "alert" in rule}
