"""Any policy group, without editing the base: the aggregated ClusterRole and the rules the
webhook keeps (docs/install.md, "Add your policy kinds"), on a real API server.

The webhook runs as its own ServiceAccount (a real token, the manifests' RBAC), as the Lease
holder that keeps the rules of the ValidatingWebhookConfiguration `policy-webhook` — the name
its RBAC allows it, pointed at this process. The control plane has no controller manager, so
`identities.aggregate` does the ClusterRole aggregation whenever a labelled ClusterRole comes or
goes, as kube-controller-manager would within a moment.

- The install page's flow: Envoy Gateway's and Kuadrant's CRDs and components; their kinds
  appear in the policy webhooks' rules, and the page's broken RateLimitPolicy is denied by
  `kubectl apply` with the page's message.
- A new group: a labelled policy CRD of a group nobody knew and its ClusterRole (the
  policy-group component) — within seconds the webhook reads it, the rules cover it, and a bad
  policy of that kind is denied by `kubectl apply`.
- The ClusterRole removed: a log line and `policy_webhook_policy_kind_readable` 0 for the kind,
  and the rules leave it out.
"""

from __future__ import annotations

import base64
import copy
import re
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from convergence import metric, wait_until
from identities import aggregate, apply_rbac, service_account_kubeconfig
from webhook_harness import REPO, WebhookProcess, kubectl

from tests.deploy import kustomizations as k

if TYPE_CHECKING:
    from cluster import LocalCluster

NAMESPACE = "policy-webhook"
CONFIGURATION = "policy-webhook"
VENDOR_CRDS = ("envoy-gateway", "kuadrant")
GROUP = "policies.groups-e2e.example"
KIND, PLURAL = "LimitPolicy", "limitpolicies"
APPS = "groups-e2e"
SYNC_SECONDS = 2.0
POLICY_HOOK = "policies.policy-attachment.dev"


def vendor_crds() -> list[dict[str, Any]]:
    return [
        doc
        for name in VENDOR_CRDS
        for doc in yaml.safe_load_all((REPO / "tests/realworld/crds" / f"{name}.yaml").read_text())
        if doc
    ]


def new_group_crd() -> dict[str, Any]:
    """A policy CRD of a group the webhook has never heard of, labelled as SPEC 1.1 asks."""
    settings = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "labels": {"gateway.networking.k8s.io/policy": "inherited"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": KIND, "plural": PLURAL, "singular": KIND.lower()},
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {
                                        "targetRefs": {"type": "array", "items": settings},
                                        "default": settings,
                                        "override": settings,
                                    },
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


BAD_POLICY = f"""\
apiVersion: {GROUP}/v1alpha1
kind: {KIND}
metadata: {{name: same-field-twice, namespace: {APPS}}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: edge}}]
  default: {{requestsPerSecond: 10}}
  override: {{requestsPerSecond: 5}}
"""


def configuration(process: WebhookProcess) -> dict[str, Any]:
    """The rendered ValidatingWebhookConfiguration, as shipped (no rules on the policy
    webhooks), pointed at `process` by URL."""
    docs = k.render("self-managed")
    config = copy.deepcopy(k.only(docs, "ValidatingWebhookConfiguration", CONFIGURATION))
    bundle = base64.b64encode(process.ca_file.read_bytes()).decode()
    for hook in config["webhooks"]:
        path = hook["clientConfig"]["service"]["path"]
        hook["clientConfig"] = {"url": process.url + path, "caBundle": bundle}
    return config


def rules_of(cluster: LocalCluster, hook: str = POLICY_HOOK) -> dict[str, set[str]]:
    """group → resources of one webhook's rules, as the API server stores them."""
    found = cluster.get_json("validatingwebhookconfiguration", CONFIGURATION)
    (webhook,) = [h for h in found["webhooks"] if h["name"] == hook]
    covered: dict[str, set[str]] = {}
    for rule in webhook.get("rules") or ():
        for group in rule["apiGroups"]:
            covered.setdefault(group, set()).update(rule["resources"])
    return covered


def policy_group_role(group: str) -> dict[str, Any]:
    docs = k.render("self-managed", ["policy-group"], group=group)
    return k.only(docs, "ClusterRole", f"policy-webhook-read.{group}")


@pytest.fixture(scope="module")
def webhook(
    cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebhookProcess]:
    workdir = tmp_path_factory.mktemp("groups")
    crds = vendor_crds()
    cluster.apply(crds)
    names = [f"crd/{crd['metadata']['name']}" for crd in crds]
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
    for namespace in ("gateway-system", APPS):
        cluster.kubectl("create", "namespace", namespace, check=False)
    apply_rbac(cluster, k.render_text(k.install_doc_kustomization()))
    kubeconfig = service_account_kubeconfig(
        cluster, NAMESPACE, "policy-webhook", workdir / "sa.kubeconfig"
    )
    process = WebhookProcess(
        cluster,
        workdir,
        name="groups",
        args=[
            "--kubeconfig", str(kubeconfig),
            "--leader-election-namespace", NAMESPACE,
            "--leader-election-name", "policy-webhook",
            "--webhook-configuration", CONFIGURATION,
            "--webhook-rules-sync-seconds", str(SYNC_SECONDS),
            "--lease-duration-seconds", "6",
            "--no-reconcile",
        ],
    )  # fmt: skip
    process.start()
    config = configuration(process)
    try:
        cluster.apply(config)
        yield process
    finally:
        process.stop()
        print(f"\n[e2e] webhook log: {process.log_path}")
        cluster.kubectl("delete", "validatingwebhookconfiguration", CONFIGURATION,
                        "--ignore-not-found", check=False)  # fmt: skip
        cluster.kubectl("delete", "clusterrole", f"policy-webhook-read.{GROUP}",
                        "--ignore-not-found", check=False)  # fmt: skip
        cluster.kubectl("delete", "crd", f"{PLURAL}.{GROUP}", "--ignore-not-found", check=False)
        # Waited for: a later module applies the vendors' CRDs again, which a CRD still being
        # deleted would refuse.
        cluster.kubectl("delete", "--ignore-not-found", "--timeout=60s", *names, check=False)
        aggregate(cluster)


def test_the_install_pages_vendors_are_judged_and_its_broken_policy_is_denied(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    wanted = {
        "kuadrant.io": {"authpolicies", "dnspolicies", "ratelimitpolicies", "tlspolicies",
                        "tokenratelimitpolicies"},
        "gateway.envoyproxy.io": {"backendtrafficpolicies", "clienttrafficpolicies",
                                  "envoyextensionpolicies", "envoypatchpolicies",
                                  "securitypolicies"},
        "gateway.networking.k8s.io": {"backendtlspolicies"},
        "gateway.networking.x-k8s.io": {"xbackendtrafficpolicies"},
    }  # fmt: skip
    took = wait_until(
        lambda: all(rules_of(cluster).get(g) == r for g, r in wanted.items()),
        30,
        "the vendors' kinds in the policy webhook's rules",
    )
    assert rules_of(cluster, "policy-deletes.policy-attachment.dev") == rules_of(cluster)
    # Named one by one: not Envoy Gateway's Backend, not a route.
    assert "backends" not in rules_of(cluster)["gateway.envoyproxy.io"]
    assert "httproutes" not in rules_of(cluster)["gateway.networking.k8s.io"]

    page = (REPO / "docs" / "install.md").read_text()
    heredoc = re.search(r"kubectl apply -f - <<'EOF'\n(.*?)\nEOF\n", page, re.DOTALL)
    said = re.search(r"```\n(Warning: \[PA-T06\].*?)\n```", page, re.DOTALL)
    assert heredoc and said, "docs/install.md lost its example"
    done = kubectl(cluster, "apply", "-f", "-", input=heredoc.group(1) + "\n")
    print(
        f"\n[e2e] vendors' kinds covered {took:.1f}s after start; kubectl said: {done.stderr.strip()}"
    )
    assert done.returncode == 1
    assert done.stderr.strip() == said.group(1).strip()


def test_a_new_policy_group_is_read_covered_and_judged_within_seconds(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    started = time.monotonic()
    cluster.apply(policy_group_role(GROUP))
    aggregate(cluster)
    cluster.apply(new_group_crd())
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{PLURAL}.{GROUP}", "--timeout=30s")
    kind = f"{KIND}.{GROUP}"
    read = wait_until(
        lambda: any("watching" in str(r.get("msg")) and kind in str(r.get("msg"))
                    for r in webhook.log_records())
        and metric(webhook, "policy_webhook_policy_kind_readable", kind=kind) == 1,
        15,
        "the webhook reads the new kind",
    )  # fmt: skip
    covered = wait_until(
        lambda: rules_of(cluster).get(GROUP) == {PLURAL}, 15, "the rules cover the new kind"
    )
    time.sleep(1.5)  # the API server picks up a changed configuration within about a second
    done = kubectl(cluster, "apply", "-f", "-", input=BAD_POLICY)
    total = time.monotonic() - started
    print(
        f"\n[e2e] new group: read {read:.1f}s, covered {read + covered:.1f}s after the CRD; "
        f"denied {total:.1f}s after the ClusterRole: {done.stderr.strip()[:160]}"
    )
    assert done.returncode == 1, done.stdout
    assert "[PA-S11]" in done.stderr
    assert f'The {KIND} "same-field-twice" is invalid' in done.stderr
    assert read + covered < 15


def test_a_removed_cluster_role_is_logged_counted_and_left_out_of_the_rules(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    kind = f"{KIND}.{GROUP}"
    wait_until(lambda: rules_of(cluster).get(GROUP) == {PLURAL}, 15, "covered first")
    started = time.monotonic()
    cluster.kubectl("delete", "clusterrole", f"policy-webhook-read.{GROUP}")
    aggregate(cluster)

    def reported() -> bool:
        logged = [
            r
            for r in webhook.log_records()
            if r.get("kind") == kind and "cannot be read" in str(r.get("msg"))
        ]
        counted = metric(webhook, "policy_webhook_policy_kind_readable", kind=kind)
        return bool(logged) and counted == 0 and GROUP not in rules_of(cluster)

    took = wait_until(reported, 3 * SYNC_SECONDS + 10, "log line, metric, rules")
    (line,) = [
        r
        for r in webhook.log_records()
        if r.get("kind") == kind and "cannot be read" in str(r.get("msg"))
    ]
    print(
        f"\n[e2e] ClusterRole removed: reported {took:.1f}s later: {line['level']} {line['msg'][:120]}…"
    )
    assert line["level"] == "WARNING"
    assert "policy-attachment.dev/aggregate-to-policy-webhook=true" in line["msg"]
    assert metric(webhook, "policy_webhook_webhook_rules_syncs_total", result="error") == 0
    assert time.monotonic() - started < 3 * SYNC_SECONDS + 10
    # The other groups stay as they were.
    assert "kuadrant.io" in rules_of(cluster)
