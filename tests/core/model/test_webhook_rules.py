"""The policy webhooks' rules from the readable policy kinds, and RBAC rules read as an
authorizer would: pure functions, table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.core.model import webhook_rules as rules
from webhook.core.model.webhook_rules import PolicyResource

RETRY = PolicyResource("policies.acme.io", "retrypolicies", "RetryPolicy")
TIMEOUT = PolicyResource("policies.acme.io", "timeoutpolicies", "TimeoutPolicy")
BTLS = PolicyResource("gateway.networking.k8s.io", "backendtlspolicies", "BackendTLSPolicy")
READ = ["get", "list", "watch"]


@pytest.mark.parametrize(
    ("rule", "readable"),
    [
        ({"apiGroups": ["policies.acme.io"], "resources": ["*"], "verbs": READ}, True),
        ({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, True),
        ({"apiGroups": ["policies.acme.io"], "resources": ["retrypolicies"], "verbs": READ}, True),
        ({"apiGroups": ["policies.acme.io"], "resources": ["retrypolicies"], "verbs": ["list"]}, False),
        ({"apiGroups": ["policies.acme.io"], "resources": ["timeoutpolicies"], "verbs": READ}, False),
        ({"apiGroups": ["other.io"], "resources": ["*"], "verbs": READ}, False),
        # A rule for some objects by name never allows listing the collection.
        ({"apiGroups": ["policies.acme.io"], "resources": ["*"], "verbs": READ,
          "resourceNames": ["one"]}, False),
    ],
)  # fmt: skip
def test_a_kind_is_readable_when_one_rule_allows_list_and_watch(
    rule: dict[str, Any], readable: bool
) -> None:
    assert rules.readable([rule], RETRY) is readable


def test_list_and_watch_may_come_from_two_rules() -> None:
    granted = [
        {"apiGroups": ["policies.acme.io"], "resources": ["retrypolicies"], "verbs": ["list"]},
        {"apiGroups": ["policies.acme.io"], "resources": ["*"], "verbs": ["watch"]},
    ]
    assert rules.readable(granted, RETRY)


def test_wanted_rules_name_each_resource_one_rule_per_group_in_a_stable_order() -> None:
    wanted = rules.wanted_rules([TIMEOUT, BTLS, RETRY, RETRY], ("CREATE", "UPDATE"))
    assert wanted == [
        {"apiGroups": ["gateway.networking.k8s.io"], "apiVersions": ["*"],
         "operations": ["CREATE", "UPDATE"], "resources": ["backendtlspolicies"], "scope": "*"},
        {"apiGroups": ["policies.acme.io"], "apiVersions": ["*"],
         "operations": ["CREATE", "UPDATE"], "resources": ["retrypolicies", "timeoutpolicies"],
         "scope": "*"},
    ]  # fmt: skip
    assert all("*" not in rule["resources"] for rule in wanted)


def configuration(**rules_by_hook: Any) -> dict[str, Any]:
    hooks: list[dict[str, Any]] = [
        {"name": "policies.policy-attachment.dev", "failurePolicy": "Fail"},
        {"name": "policy-deletes.policy-attachment.dev", "failurePolicy": "Ignore"},
        {"name": "target-deletes.policy-attachment.dev", "rules": [{"apiGroups": ["x"]}]},
    ]
    for hook in hooks:
        key = hook["name"].split(".")[0].replace("-", "_")
        if key in rules_by_hook:
            hook["rules"] = rules_by_hook[key]
    return {"metadata": {"name": "policy-webhook", "resourceVersion": "42"}, "webhooks": hooks}


def test_the_patch_sets_only_the_two_policy_webhooks_rules_and_carries_the_version() -> None:
    patch = rules.rules_patch(configuration(), [RETRY])
    assert patch == {
        "metadata": {"resourceVersion": "42"},
        "webhooks": [
            {"name": "policies.policy-attachment.dev",
             "rules": rules.wanted_rules([RETRY], ("CREATE", "UPDATE"))},
            {"name": "policy-deletes.policy-attachment.dev",
             "rules": rules.wanted_rules([RETRY], ("DELETE",))},
        ],
    }  # fmt: skip


def test_rules_already_right_need_no_patch_whatever_their_order_and_defaults() -> None:
    writes = rules.wanted_rules([RETRY, BTLS], ("CREATE", "UPDATE"))
    deletes = rules.wanted_rules([RETRY, BTLS], ("DELETE",))
    # As the API server returns them: another order, and `scope` defaulted.
    served = [{**rule, "resources": list(reversed(rule["resources"]))} for rule in reversed(writes)]
    config = configuration(policies=served, policy_deletes=deletes)
    assert rules.rules_patch(config, [BTLS, RETRY]) is None


def test_no_readable_kind_empties_the_rules_and_absent_rules_count_as_empty() -> None:
    config = configuration(policies=rules.wanted_rules([RETRY], ("CREATE", "UPDATE")))
    patch = rules.rules_patch(config, [])
    assert patch is not None
    assert patch["webhooks"] == [{"name": "policies.policy-attachment.dev", "rules": []}]
    assert rules.rules_patch(configuration(), []) is None


def test_a_configuration_without_policy_webhooks_is_left_alone() -> None:
    foreign = {"metadata": {"resourceVersion": "1"}, "webhooks": [{"name": "other.example"}]}
    assert rules.managed_webhooks(foreign) == []
    assert rules.rules_patch(foreign, [RETRY]) is None
    assert rules.managed_webhooks(configuration()) == list(rules.POLICY_WEBHOOKS)
