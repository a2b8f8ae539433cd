"""`check -o sarif`: the findings as a SARIF 2.1.0 log, the format code-review tools annotate
pull requests from (GitHub code scanning, GitLab, Azure DevOps).

One result per finding at the line of its field; the rule table is the tool's rule list, so
a viewer can show each rule's meaning and fix. A duplicate object is a result of its own
(`duplicate-object`), pointing at both copies; skipped documents are notifications of the run,
not results: nothing is wrong with a kustomization. Pure: the shell says how a file name
becomes a URI.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from webhook.core.rules.check_results import CheckedPolicy, CheckRun, Where
from webhook.core.rules.ruletable import RULES

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
DUPLICATE_RULE = "duplicate-object"

# SARIF's levels for our actions: a denial fails the check, a warning does not, an audit
# finding is only recorded.
LEVELS = {"deny": "error", "warn": "warning", "audit": "note"}


def sarif_log(run: CheckRun, *, tool_version: str, uri: Callable[[str], str]) -> dict[str, Any]:
    """The whole log: one run of `policy-webhook check`."""
    rule_ids = [rule.id for rule in RULES] + [DUPLICATE_RULE]
    index = {rule_id: i for i, rule_id in enumerate(rule_ids)}
    results = [result for policy in run.policies for result in _policy_results(policy, index, uri)]
    results += [
        {
            "ruleId": DUPLICATE_RULE,
            "ruleIndex": index[DUPLICATE_RULE],
            "level": "warning",
            "message": {
                "text": f"{d.key} is also written at {d.ignored}; this later copy is the one checked"
            },
            "locations": [_location(d.used, uri)],
            "relatedLocations": [{"id": 1, **_location(d.ignored, uri)}],
        }
        for d in run.duplicates
    ]
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "policy-webhook",
                        "version": tool_version,
                        "rules": _rules(),
                    }
                },
                "invocations": [
                    {
                        "executionSuccessful": True,
                        "toolExecutionNotifications": [
                            {
                                "level": "note",
                                "message": {"text": f"skipped: {s.reason}"},
                                "locations": [_location(s.where, uri)],
                            }
                            for s in run.skipped
                        ],
                    }
                ],
                "results": results,
            }
        ],
    }


def _rules() -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = [
        {
            "id": rule.id,
            "shortDescription": {"text": rule.meaning},
            "help": {"text": f"Fix: {rule.fix}"},
            "defaultConfiguration": {"level": LEVELS.get(rule.default_action, "none")},
            "properties": {"specSection": rule.section},
        }
        for rule in RULES
    ]
    rules.append(
        {
            "id": DUPLICATE_RULE,
            "shortDescription": {"text": "the same object is written twice"},
            "help": {"text": "Fix: keep one copy, or check the built output (kustomize build)"},
            "defaultConfiguration": {"level": "warning"},
        }
    )
    return rules


def _policy_results(
    policy: CheckedPolicy, index: dict[str, int], uri: Callable[[str], str]
) -> list[dict[str, Any]]:
    return [
        {
            "ruleId": judged.finding.rule_id,
            **(
                {"ruleIndex": index[judged.finding.rule_id]}
                if judged.finding.rule_id in index
                else {}
            ),
            "level": LEVELS[judged.action],
            "message": {"text": f"{policy.key}: {judged.finding.text}"},
            "locations": [_location(Where(policy.where.file, line), uri)],
            # Same finding on the same policy, same fingerprint: review tools match it across
            # pushes although lines move.
            "partialFingerprints": {
                "policyFinding/v1": f"{policy.key}|{judged.finding.rule_id}|{judged.finding.field}"
            },
        }
        for judged, line in policy.shown()
    ]


def _location(where: Where, uri: Callable[[str], str]) -> dict[str, Any]:
    return {
        "physicalLocation": {
            "artifactLocation": {"uri": uri(where.file)},
            "region": {"startLine": max(1, where.line)},
        }
    }
