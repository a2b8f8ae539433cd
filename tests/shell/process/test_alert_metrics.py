"""Every metric an alert of components/monitoring names is one the webhook exports.

The names exported are read from a running app's `/metrics` (the text Prometheus scrapes,
families with no sample yet included) and must hold each metric name of each PromQL
expression; an alert on a name that does not exist never fires, silently.
"""

from __future__ import annotations

import re

import pytest
import yaml

from tests.fixtures.https import RunningWebhook
from tests.fixtures.paths import REPO

RULES = REPO / "manifests" / "components" / "monitoring" / "prometheusrule.yaml"
# Words of PromQL that are not metric names: operators, modifiers, functions' argument words.
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
            "group_right", "bool", "offset", "inf", "nan"}  # fmt: skip


def expressions() -> dict[str, str]:
    rule = yaml.safe_load(RULES.read_text())
    return {r["alert"]: r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not a function call,
    a keyword, a label matcher's name or value, a grouping label or a range's duration."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range durations
    text = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", "", text)  # grouping labels
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        rest = text[match.end() :].lstrip()
        if rest.startswith("("):
            continue  # a function
        if match.group().lower() in KEYWORDS:
            continue
        names.add(match.group())
    return names


def exported(text: str) -> set[str]:
    """Series names a scrape of `text` yields: a histogram's three, every other family's own."""
    names = set()
    for kind_line in re.finditer(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE):
        name, kind = kind_line.groups()
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        elif kind == "summary":
            names |= {name, f"{name}_sum", f"{name}_count"}
        else:
            names.add(name)
    return names


@pytest.fixture
def scraped(webhook: RunningWebhook) -> str:
    """/metrics of the webhook app served over HTTPS, as Prometheus scrapes it."""
    reply = webhook.request("GET", "/metrics")
    assert reply.status == 200
    return reply.text


def test_the_name_reader_finds_names_and_only_names() -> None:
    expr = 'sum by (pod) (increase(a_total{verdict="error"}[10m])) > 0 and b - time() < 14 * 86400'
    assert metric_names(expr) == {"a_total", "b"}
    assert metric_names("(sum(c) or vector(0)) < 1") == {"c"}


@pytest.mark.parametrize(("alert", "expr"), sorted(expressions().items()))
def test_an_alert_names_only_metrics_the_webhook_exports(
    scraped: str, alert: str, expr: str
) -> None:
    names = metric_names(expr)
    assert names, f"{alert}: no metric found in {expr!r}"
    missing = names - exported(scraped)
    assert not missing, f"{alert} names {sorted(missing)}, which /metrics does not export"


def test_the_scrape_has_build_info_process_metrics_and_no_created_series(
    scraped: str,
) -> None:
    assert re.search(r'^policy_webhook_build_info\{core="(compiled|python)",revision="[^"]+",version="[^"]+"\} 1\.0$',
                     scraped, re.MULTILINE)  # fmt: skip
    assert "process_resident_memory_bytes" in scraped
    assert "python_info" in scraped
    assert "_created" not in scraped
