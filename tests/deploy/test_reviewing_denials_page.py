"""docs/reviewing-denials.md agrees with what it describes: the audit policy it shows is the
shipped file (the one the end-to-end suite starts its API server with), and every annotation
key, metric, flag, namespace, label and link it names exists. Its `jq` queries run on real logs
in tests/e2e/test_audit_log.py."""

from __future__ import annotations

import argparse
import re
from typing import Any

import pytest
import yaml

from tests.fixtures.paths import DOCS, REPO
from webhook.core.admission import reviews
from webhook.shell.cli.main import build_parser
from webhook.shell.process.metrics import Metrics

PAGE = DOCS / "reviewing-denials.md"
AUDIT_POLICY = DOCS / "audit-policy.yaml"
AUDIT_KEYS = {reviews.AUDIT_VERDICT, reviews.AUDIT_RULES, reviews.AUDIT_CAUSES,
              reviews.AUDIT_FINDINGS}  # fmt: skip
# Flags the page names that belong to kube-apiserver or kubectl, not to policy-webhook.
NOT_OURS = {"--audit-policy-file", "--audit-log-path", "--event-ttl", "--as", "--as-group",
            "--dry-run", "--field-selector", "--types", "--since", "--tail"}  # fmt: skip


def page() -> str:
    return PAGE.read_text(encoding="utf-8")


def manifests(name: str) -> list[dict[str, Any]]:
    text = (REPO / "manifests" / "base" / name).read_text()
    return [doc for doc in yaml.safe_load_all(text) if doc]


def validating_webhooks() -> list[dict[str, Any]]:
    return [
        hook
        for doc in manifests("webhooks.yaml")
        if doc["kind"] == "ValidatingWebhookConfiguration"
        for hook in doc["webhooks"]
    ]


def test_the_audit_policy_on_the_page_is_the_shipped_file() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", page(), re.DOTALL)
    shown = [b for b in blocks if "kind: Policy" in b and "audit.k8s.io/v1" in b]
    assert shown == [AUDIT_POLICY.read_text(encoding="utf-8")]


def test_the_audit_policy_records_policy_writes_at_metadata_and_nothing_else() -> None:
    policy = yaml.safe_load(AUDIT_POLICY.read_text())
    assert (policy["apiVersion"], policy["kind"]) == ("audit.k8s.io/v1", "Policy")
    assert policy["omitStages"] == ["RequestReceived"]
    writes, rest = policy["rules"]
    assert writes["level"] == "Metadata"  # annotations and users; no request body
    assert {"create", "update", "patch", "delete"} <= set(writes["verbs"])
    # The example group, as the policy webhook's rules in the shipped configuration name it.
    (policies,) = [
        h for h in validating_webhooks() if h["name"] == "policies.policy-attachment.dev"
    ]
    groups = {g for rule in policies["rules"] for g in rule["apiGroups"]}
    assert {r["group"] for r in writes["resources"]} == groups
    assert rest == {"level": "None"}


def test_every_annotation_key_on_the_page_is_one_a_shipped_webhook_returns() -> None:
    names = {hook["name"] for hook in validating_webhooks()}
    named = set(re.findall(r"([a-z-]+\.policy-attachment\.dev)/([a-z-]+)", page()))
    assert named
    for webhook, key in named:
        assert webhook in names, webhook
        assert key in AUDIT_KEYS, key
    assert {key for webhook, key in named if webhook == "policies.policy-attachment.dev"} == (
        AUDIT_KEYS
    )


def test_every_metric_on_the_page_exists() -> None:
    exported = set()
    for family in Metrics().registry.collect():
        exported.add(family.name)
        if family.type == "counter":
            exported.add(f"{family.name}_total")
    named = set(re.findall(r"\bpolicy_webhook_[a-z_]+[a-z]", page()))
    assert named
    assert named <= exported, named - exported


def _our_flags() -> set[str]:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {
        flag
        for sub in subparsers.choices.values()
        for action in sub._actions
        for flag in action.option_strings
    }


def test_every_flag_on_the_page_is_ours_or_named_as_the_api_servers_or_kubectls() -> None:
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*[a-z]", page()))
    assert {"--log-decisions", "--manifests"} <= named
    assert named - NOT_OURS <= _our_flags(), named - NOT_OURS - _our_flags()


def test_the_log_query_selects_the_shipped_deployments_pods() -> None:
    (deployment,) = manifests("deployment.yaml")
    match = re.search(r"kubectl logs -n (\S+) -l (\S+) ", page())
    assert match, "the page lost its `kubectl logs -n NS -l SELECTOR` line"
    namespace, selector = match.groups()
    assert namespace == deployment["metadata"]["namespace"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    wanted = dict(pair.split("=") for pair in selector.split(","))
    assert wanted.items() <= labels.items()
    assert wanted.items() <= deployment["spec"]["selector"]["matchLabels"].items()


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@pytest.mark.parametrize("source", ["reviewing-denials.md", "configuration.md", "../README.md"])
def test_links_between_the_page_and_the_others_resolve(source: str) -> None:
    text = (DOCS / source).read_text(encoding="utf-8")
    links = re.findall(r"\]\(((?:docs/)?[\w.-]+\.md)(?:#([\w-]+))?\)", text)
    if source != "reviewing-denials.md":
        assert any(path.endswith("reviewing-denials.md") for path, _ in links), source
    for path, anchor in links:
        target = (DOCS / source).parent / path
        assert target.is_file(), path
        if anchor:
            headings = re.findall(r"^#+ (.+)$", target.read_text(encoding="utf-8"), re.M)
            assert anchor in {_anchor(h) for h in headings}, f"{path}#{anchor}"
