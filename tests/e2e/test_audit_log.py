"""The API server's audit log of policy writes (SPEC §2.5, §8): who wrote, what the webhook said.

kube-apiserver reads its audit flags only when it starts, and the session's cluster has none, so
this module starts its own control plane with `--audit-policy-file=docs/audit-policy.yaml` (the
file docs/reviewing-denials.md shows) and `--audit-log-path`. The webhook runs in cluster mode as
its ServiceAccount with the shipped RBAC and webhook configurations; a developer, impersonated
with `kubectl --as`, may create RetryPolicies in `apps` and nothing else.

What the audit events must hold: the developer (`impersonatedUser`; `user` is the admin who
impersonates), the refusal in `responseStatus`, and our annotations under the policy webhook's
name, with their exact keys. On v1.20 (this suite's server) to v1.23, `responseStatus` at level
Metadata has no message (Kubernetes 1.24 added it): `policies.policy-attachment.dev/causes` is
what says why there. Last, the page's own `jq` queries run over this run's logs.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cluster as cluster_lib
import provision
import pytest
from developer import (
    AS_DEVELOPER,
    GROUP,
    MESSAGE,
    USER,
    deny_as_developer,
    wait_for,
    webhook_for_developer,
)
from webhook_harness import REPO, WebhookProcess, kubectl

AUDIT_POLICY = REPO / "docs" / "audit-policy.yaml"
PAGE = REPO / "docs" / "reviewing-denials.md"
PREFIX = "policies.policy-attachment.dev/"  # the policy webhook's name (manifests/base)
WARNED = """
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {name: retry-checkout, namespace: apps}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: checkout}]
  default: {retryOn: ["503"]}
"""
# The webhook's config: the impact preview only recorded (SPEC §2.4), never shown.
CONFIG = "ruleActions: {PA-C04: audit}\n"
# Only an impact preview when created; a label changes no effective value: a clean UPDATE.
PREVIEWED = """
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {name: retry-cart, namespace: shop}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: cart}]
  default: {backoff: {baseInterval: 200ms}}
"""


class Audited:
    """The dedicated control plane, and where its audit log is."""

    def __init__(self, local: cluster_lib.LocalCluster, log: Path) -> None:
        self.cluster = local
        self.log = log

    def events(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        lines = self.log.read_text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def event(self, verb: str, name: str, *, dry_run: bool = False) -> dict[str, Any]:
        """The one audit event of a write (polled: the log backend writes after the answer)."""

        def find() -> dict[str, Any] | None:
            found = [
                e
                for e in self.events()
                if (e["verb"], e["objectRef"].get("name")) == (verb, name)
                and ("dryRun=" in e["requestURI"]) == dry_run
            ]
            assert len(found) <= 1, found
            return found[0] if found else None

        return wait_for(find)


def ours(event: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in (event.get("annotations") or {}).items() if k.startswith(PREFIX)}


@pytest.fixture(scope="module")
def audited(request: pytest.FixtureRequest) -> Iterator[Audited]:
    workdir = Path(tempfile.mkdtemp(prefix="policy-webhook-e2e-audit-"))
    log = workdir / "audit.log"
    local = cluster_lib.LocalCluster(
        provision.ensure_binaries(),
        workdir=workdir,
        apiserver_args=[f"--audit-policy-file={AUDIT_POLICY}", f"--audit-log-path={log}"],
    )
    try:
        local.start()
        local.install_gateway_api_crds(channel=cluster_lib.SUITE_CHANNEL)
        yield Audited(local, log)
    finally:
        failed = request.session.testsfailed > 0
        if failed or os.environ.get("E2E_KEEP_CLUSTER_DIR") == "1":
            local.stop()
            print(f"\n[e2e] kept the audited cluster's dir: {local.workdir}")
        else:
            local.cleanup()


@pytest.fixture(scope="module")
def webhook(audited: Audited, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookProcess]:
    workdir = tmp_path_factory.mktemp("audit")
    config = workdir / "config.yaml"
    config.write_text(CONFIG)
    args = ("--config", str(config), "--events=false")
    with webhook_for_developer(audited.cluster, workdir, "audit", *args) as process:
        yield process


def test_a_denied_create_is_audited_with_the_developer_the_refusal_and_why(
    audited: Audited, webhook: WebhookProcess
) -> None:
    stderr = deny_as_developer(audited.cluster, "retry-everything")
    assert 'The RetryPolicy "retry-everything" is invalid: spec.targetRef: [PA-S01] set ' in (
        stderr
    ), stderr

    event = audited.event("create", "retry-everything")
    assert event["level"] == "Metadata" and "requestObject" not in event  # no policy body
    assert event["impersonatedUser"]["username"] == USER
    assert GROUP in event["impersonatedUser"]["groups"]
    assert event["user"]["username"] == "admin"  # who impersonated
    assert event["objectRef"]["namespace"] == "apps"
    # v1.20 to v1.23 at Metadata: status, reason and code only (1.24 adds message and details).
    assert event["responseStatus"] == {
        "metadata": {},
        "status": "Failure",
        "reason": "Invalid",
        "code": 422,
    }
    assert ours(event) == {
        f"{PREFIX}verdict": "denied",
        f"{PREFIX}rules": "PA-S01",
        f"{PREFIX}causes": MESSAGE,
    }
    assert event["annotations"]["authorization.k8s.io/decision"] == "allow"  # RBAC let her try


def test_a_dry_run_denial_is_audited_too_with_dry_run_in_its_uri(
    audited: Audited, webhook: WebhookProcess
) -> None:
    deny_as_developer(audited.cluster, "retry-dry", "--dry-run=server")
    event = audited.event("create", "retry-dry", dry_run=True)
    assert "dryRun=All" in event["requestURI"]
    assert ours(event)[f"{PREFIX}verdict"] == "denied"


def test_a_warned_create_keeps_the_warning_the_audit_log_would_otherwise_lose(
    audited: Audited, webhook: WebhookProcess
) -> None:
    done = kubectl(audited.cluster, *AS_DEVELOPER, "create", "-f", "-", input=WARNED)
    assert done.returncode == 0, done.stderr
    (warning,) = [line for line in done.stderr.splitlines() if line.startswith("Warning: ")]

    event = audited.event("create", "retry-checkout")
    assert event["responseStatus"] == {"metadata": {}, "code": 201}
    assert ours(event) == {
        f"{PREFIX}verdict": "warned",
        f"{PREFIX}rules": "PA-T06",
        f"{PREFIX}causes": warning.removeprefix("Warning: "),
    }


def test_a_finding_set_to_audit_is_recorded_there_alone_and_a_clean_write_not_at_all(
    audited: Audited, webhook: WebhookProcess
) -> None:
    local = audited.cluster
    created = kubectl(local, "create", "-f", "-", input=PREVIEWED)
    assert created.returncode == 0 and "Warning" not in created.stderr, created.stderr
    labelled = kubectl(local, "label", "retrypolicy", "retry-cart", "-n", "shop", "team=shop")
    assert labelled.returncode == 0 and "Warning" not in labelled.stderr, labelled.stderr

    audit_only = ours(audited.event("create", "retry-cart"))
    assert audit_only.pop(f"{PREFIX}audit-findings").startswith(
        "[PA-C04] changes backoff.baseInterval on 1 HTTPRoute"
    )
    assert audit_only == {f"{PREFIX}verdict": "allowed", f"{PREFIX}rules": "PA-C04"}
    clean = audited.event("patch", "retry-cart")
    assert clean["responseStatus"]["code"] == 200
    assert ours(clean) == {}
    assert set(clean["annotations"]) == {
        "authorization.k8s.io/decision",
        "authorization.k8s.io/reason",
    }


# --- the page's queries, over this run's logs -------------------------------------------------


def page_block(marker: str) -> str:
    """The shell block of docs/reviewing-denials.md whose first line is `# <marker>`."""
    text = PAGE.read_text(encoding="utf-8")
    match = re.search(r"```sh\n# " + re.escape(marker) + r"\n(.*?)```", text, re.DOTALL)
    assert match, f"docs/reviewing-denials.md lost its block '# {marker}'"
    return match.group(1)


def jq_of(block: str) -> list[str]:
    """The `jq` command of a block: from `jq` to the end, line continuations joined."""
    start = block.index("jq ")
    return shlex.split(block[start:].replace("\\\n", " "))


def run_jq(command: list[str], *, input: str) -> list[dict[str, Any]]:
    done = subprocess.run(command, input=input, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_the_pages_command_lists_the_groups_the_audit_policy_must_name(
    audited: Audited, webhook: WebhookProcess
) -> None:
    block = page_block("the API groups of your policy kinds")
    command = shlex.split(block.replace("\\\n", " "))
    assert command[:4] == ["kubectl", "get", "validatingwebhookconfiguration", "policy-webhook"]
    command[3] = "policy-webhook-audit"  # as `registered` names it here
    done = audited.cluster.kubectl(*command[1:])
    assert json.loads(done.stdout) == ["policies.example.com"]


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
def test_the_pages_audit_query_answers_who_was_denied_what_and_why(
    audited: Audited, webhook: WebhookProcess
) -> None:
    deny_as_developer(audited.cluster, "retry-asked")
    audited.event("create", "retry-asked")
    command = jq_of(page_block("who was denied what, and why, in the last hour: the audit log"))
    assert command[-1] == "audit.log"  # the file of --audit-log-path
    rows = run_jq(command[:-1], input=audited.log.read_text())
    assert {
        "user": USER,
        "verb": "create",
        "dryRun": False,
        "resource": "retrypolicies",
        "namespace": "apps",
        "name": "retry-asked",
        "why": MESSAGE,
    } in [{k: v for k, v in row.items() if k != "time"} for row in rows]
    assert {row["why"] for row in rows} == {MESSAGE}  # denials only: no warning, no allow


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
def test_the_pages_decision_log_query_answers_the_same_from_the_webhooks_log(
    audited: Audited, webhook: WebhookProcess
) -> None:
    deny_as_developer(audited.cluster, "retry-logged")
    block = page_block("who was denied what, and why, in the last hour: the decision log")
    assert block.startswith("kubectl logs -n policy-webhook ")

    def logged() -> list[dict[str, Any]] | None:
        rows = run_jq(jq_of(block), input=webhook.log_path.read_text())
        return rows if any(row["name"] == "retry-logged" for row in rows) else None

    rows = wait_for(logged)
    assert {
        "user": USER,
        "operation": "CREATE",
        "dryRun": False,
        "kind": "RetryPolicy.policies.example.com",
        "namespace": "apps",
        "name": "retry-logged",
        "why": [MESSAGE],
    } in [{k: v for k, v in row.items() if k != "time"} for row in rows]
    assert {tuple(row["why"]) for row in rows} == {(MESSAGE,)}  # denials only
