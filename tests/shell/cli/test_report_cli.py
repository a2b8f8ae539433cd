"""`policy-webhook report` from files, as an admin or a CI job runs it: the console script in
a new process; the table read as a person reads it, JSON and YAML parsed back; the exit code
(0 nothing at fail, 1 something is, 2 usage, read or connection errors). From a real cluster:
tests/e2e/test_policy_reports.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.fixtures.console import Ran, run
from tests.fixtures.paths import EXAMPLES

CLUSTER = ("--manifests", str(EXAMPLES / "cluster"))
MISSING_TARGET = ("--manifests", str(EXAMPLES / "broken" / "t06-target-does-not-exist.yaml"))
BOTH_REF_FIELDS = ("--manifests", str(EXAMPLES / "broken" / "s01-targetref-and-targetrefs.yaml"))


def report(*args: str) -> Ran:
    return run("report", *args, timeout=60)


def rows(ran: Ran) -> list[list[str]]:
    """The table's rows (header first) split on runs of two or more spaces, counts line apart."""
    lines = ran.out.strip().splitlines()
    return [[cell for cell in line.split("  ") if cell] for line in lines[:-1]]


def test_the_table_lists_each_finding_of_every_namespace_and_exits_0_on_warnings() -> None:
    ran = report("-A", *CLUSTER)
    assert ran.code == 0, ran
    table = rows(ran)
    assert [c.strip() for c in table[0]] == [
        "NAMESPACE",
        "POLICY",
        "RULE",
        "RESULT",
        "FIELD",
        "MESSAGE",
    ]
    found = {(r[0].strip(), r[1].strip(), r[2].strip(), r[3].strip()) for r in table[1:]}
    assert found == {
        ("apps", "HealthCheckPolicy/foo-health", "PA-C01", "warn"),  # the winner, and
        ("apps", "HealthCheckPolicy/foo-health-2", "PA-C01", "warn"),  # the one it beats
        ("apps", "RetryPolicy/storefront-retry", "PA-C02", "warn"),
        ("infra", "RetryPolicy/gw-retry", "PA-C03", "warn"),
    }
    assert ran.out.strip().splitlines()[-1] == "11 policies, 3 reports: 0 fail, 4 warn"


def test_a_finding_at_fail_exits_1() -> None:
    ran = report("-A", *CLUSTER, *BOTH_REF_FIELDS, *MISSING_TARGET)
    assert ran.code == 1, ran
    results = {tuple(c.strip() for c in r[1:4]) for r in rows(ran)[1:]}
    assert ("RetryPolicy/retry-both-ref-fields", "PA-S01", "fail") in results
    assert ("RetryPolicy/retry-missing-route", "PA-T06", "warn") in results


def test_one_namespace_only_and_the_counts_of_it() -> None:
    ran = report("-n", "infra", *CLUSTER)
    assert ran.code == 0, ran
    assert [r[0].strip() for r in rows(ran)[1:]] == ["infra"]
    nothing = report("-n", "nowhere", *CLUSTER)
    assert (nothing.code, nothing.out) == (0, "0 policies, 0 reports: 0 fail, 0 warn\n")


def test_json_and_yaml_are_one_versioned_document_of_the_reports() -> None:
    as_json = report("-A", *CLUSTER, *MISSING_TARGET, "-o", "json")
    as_yaml = report("-A", *CLUSTER, *MISSING_TARGET, "-o", "yaml")
    assert (as_json.code, as_yaml.code) == (0, 0)
    document = json.loads(as_json.out)
    assert yaml.safe_load(as_yaml.out) == document
    assert (document["apiVersion"], document["kind"]) == ("cli.policy-attachment.dev/v1", "Report")
    assert document["summary"] == {"policies": 12, "reports": 3, "pass": 0, "fail": 0,
                                   "warn": 5, "error": 0, "skip": 0}  # fmt: skip
    apps = next(r for r in document["reports"] if r["metadata"].get("namespace") == "apps")
    assert apps["apiVersion"] == "wgpolicyk8s.io/v1alpha2" and apps["kind"] == "PolicyReport"
    missing = next(r for r in apps["results"] if r["policy"] == "PA-T06")
    assert missing["resources"][0]["name"] == "retry-missing-route"
    assert missing["properties"] == {"field": "spec.targetRefs[0]", "action": "warn"}
    assert "timestamp" not in missing  # computed now, printed: no time of first sight


def test_usage_and_read_errors_exit_2_in_one_line(tmp_path: Path) -> None:
    both = report("-n", "apps", "-A", *CLUSTER)
    assert both.code == 2 and "not allowed with" in both.err, both
    missing = report("-A", "--manifests", str(tmp_path / "nope"))
    assert missing.code == 2 and "Traceback" not in missing.err, missing
    assert missing.err.strip().splitlines() == [
        f"policy-webhook: error: {tmp_path / 'nope'}: no such file or directory"
    ]
    unreachable = tmp_path / "kubeconfig"
    unreachable.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "here",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "here", "context": {"cluster": "c", "user": "u"}}],
    }))  # fmt: skip
    down = report("-A", "--kubeconfig", str(unreachable), "--request-timeout", "2s")
    assert down.code == 2 and "cannot reach the API server" in down.err, down
