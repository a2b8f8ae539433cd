"""The kustomize components and the install page's kustomization, checked without a cluster.

Each component renders on both overlays with the real `kubectl kustomize`, the way
docs/install.md has an admin combine them; what it adds is read back from the output. The
end-to-end twin (tests/e2e/test_install.py) sends the same output to a real API server.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy import kustomizations as k
from tests.fixtures.paths import REALWORLD, REPO
from webhook.core.model.catalog import CATALOG

OVERLAYS = ["self-managed", "cert-manager"]
SERVICE_ACCOUNT = "system:serviceaccount:policy-webhook:policy-webhook"
RENEW = REPO / "certs" / "renew_in_cluster.py"


@pytest.fixture(autouse=True)
def _kubectl() -> None:
    if k.kubectl_path() is None:
        pytest.skip("kubectl (with built-in kustomize) is not on PATH")


def deployment_pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = k.only(docs, "Deployment", "policy-webhook")["spec"]["template"]["spec"]
    return spec


def crd_plurals() -> dict[tuple[str, str], str]:
    """(group, kind) → plural, from the vendors' CRDs kept for the real-world tests."""
    found = {}
    for path in (REALWORLD / "crds").glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                spec = doc["spec"]
                found[(spec["group"], spec["names"]["kind"])] = spec["names"]["plural"]
    return found


# --- every component renders ---------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("component", k.ALL_COMPONENTS)
def test_every_component_renders_on_every_overlay(overlay: str, component: str) -> None:
    base = {(d["kind"], d["metadata"]["name"]) for d in k.render(overlay)}
    docs = k.render(overlay, [component])
    added = {(d["kind"], d["metadata"]["name"]) for d in docs} - base
    patched = component in ("match-conditions", "priority-class")
    assert added or patched, f"{component} adds nothing"
    assert not [
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "policy-group"
    ]


def test_all_components_render_together() -> None:
    docs = k.render("self-managed", k.ALL_COMPONENTS)
    names = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert len(names) == len(set(names)), "two components make the same object"


def test_policy_group_needs_its_one_value() -> None:
    with pytest.raises(AssertionError, match="nothing selected by ConfigMap"):
        k.render_text(k.kustomization("self-managed", ["policy-group"]))


# --- reading policies ------------------------------------------------------------------------------


def aggregated(doc: dict[str, Any]) -> bool:
    return bool(doc["metadata"].get("labels", {}).get(k.AGGREGATION_LABEL) == "true")


@pytest.mark.parametrize(("component", "group"), sorted(k.VENDOR_COMPONENTS.items()))
def test_a_vendor_component_reads_exactly_its_catalog_kinds(component: str, group: str) -> None:
    docs = k.render("self-managed", [component])
    (role,) = [d for d in docs if d["kind"] == "ClusterRole" and aggregated(d)]
    (rule,) = role["rules"]
    plurals = crd_plurals()
    wanted = {plurals[(group, e.group_kind.kind)] for e in CATALOG if e.group_kind.group == group}
    assert rule["apiGroups"] == [group]
    assert set(rule["resources"]) == wanted
    assert rule["verbs"] == ["get", "list", "watch"]


def test_the_gateway_api_component_names_its_two_policy_kinds_only() -> None:
    docs = k.render("self-managed", ["gateway-api-policies"])
    (role,) = [d for d in docs if d["kind"] == "ClusterRole" and aggregated(d)]
    read = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    gateway_api = {
        (e.group_kind.group, crd_plurals()[(e.group_kind.group, e.group_kind.kind)])
        for e in CATALOG
        if e.group_kind.group.startswith("gateway.networking.")
    }
    assert (
        read
        == gateway_api
        == {
            ("gateway.networking.k8s.io", "backendtlspolicies"),
            ("gateway.networking.x-k8s.io", "xbackendtrafficpolicies"),
        }
    )


def test_every_catalog_group_has_a_component() -> None:
    covered = set(k.VENDOR_COMPONENTS.values()) | {
        "gateway.networking.k8s.io",
        "gateway.networking.x-k8s.io",
    }
    assert {e.group_kind.group for e in CATALOG} == covered


def test_the_policy_group_component_reads_the_group_it_is_given() -> None:
    docs = k.render("self-managed", ["policy-group"], group="policies.acme.io")
    (role,) = [d for d in docs if d["kind"] == "ClusterRole" and aggregated(d)]
    assert role["metadata"]["name"] == "policy-webhook-read.policies.acme.io"
    assert role["rules"] == [
        {"apiGroups": ["policies.acme.io"], "resources": ["*"], "verbs": ["get", "list", "watch"]}
    ]


@pytest.mark.parametrize(
    "component", [*k.VENDOR_COMPONENTS, "gateway-api-policies", "policy-group"]
)
def test_a_reading_component_only_reads(component: str) -> None:
    docs = k.render("self-managed", [component])
    for doc in docs:
        if doc["kind"] == "ClusterRole" and aggregated(doc):
            for rule in doc["rules"]:
                assert rule["verbs"] == ["get", "list", "watch"]
                assert "secrets" not in rule["resources"]

    def bindings(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [d for d in found if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]

    assert bindings(docs) == bindings(k.render("self-managed")), "aggregation binds it, not this"


# --- monitoring ------------------------------------------------------------------------------------


def test_the_pod_monitor_scrapes_every_replica_over_verified_https() -> None:
    docs = k.render("self-managed", ["monitoring"])
    monitor = k.only(docs, "PodMonitor")["spec"]
    template = k.only(docs, "Deployment")["spec"]["template"]
    assert monitor["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    (endpoint,) = monitor["podMetricsEndpoints"]
    (container,) = template["spec"]["containers"]
    assert endpoint["port"] in {p["name"] for p in container["ports"]}
    assert (endpoint["scheme"], endpoint["path"]) == ("https", "/metrics")
    tls = endpoint["tlsConfig"]
    assert "insecureSkipVerify" not in tls
    service = k.only(docs, "Service")["metadata"]
    assert tls["serverName"] == f"{service['name']}.{service['namespace']}.svc"
    secret = tls["ca"]["secret"]
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    assert secret["name"] == volumes["tls"]["secret"]["secretName"]
    assert secret["key"] == "ca.crt"


def test_every_alert_says_what_to_do() -> None:
    rule = k.only(k.render("self-managed", ["monitoring"]), "PrometheusRule")
    alerts = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    names = [a["alert"] for a in alerts]
    assert names == sorted(set(names), key=names.index)  # no duplicates
    assert {
        "PolicyWebhookCertificateExpiresSoon",
        "PolicyWebhookStateStale",
        "PolicyWebhookNoLeader",
        "PolicyWebhookReconcileFailing",
        "PolicyWebhookInternalErrors",
        "PolicyWebhookPolicyKindUnreadable",
    } <= set(names)
    for alert in alerts:
        assert alert["labels"]["severity"] in ("warning", "critical"), alert["alert"]
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]
    expiry = next(a for a in alerts if a["alert"] == "PolicyWebhookCertificateExpiresSoon")
    assert "14 * 86400" in expiry["expr"]
    stale_leader = next(a for a in alerts if a["alert"] == "PolicyWebhookNoLeader")
    assert stale_leader["for"] == "5m"
    failing = next(a for a in alerts if a["alert"] == "PolicyWebhookReconcileFailing")
    assert failing["for"] == "15m"


def test_the_install_page_lists_every_alert() -> None:
    rule = k.only(k.render("self-managed", ["monitoring"]), "PrometheusRule")
    page = (REPO / "docs" / "install.md").read_text()
    for group in rule["spec"]["groups"]:
        for alert in group["rules"]:
            assert f"`{alert['alert']}`" in page, alert["alert"]


# --- webhook settings, pod, certificates -----------------------------------------------------------


def test_match_conditions_skip_only_the_reconcilers_own_writes() -> None:
    docs = k.render("self-managed", ["match-conditions"])
    hooks = {
        h["name"]: h
        for d in docs
        if d["kind"].endswith("WebhookConfiguration")
        for h in d["webhooks"]
    }
    with_conditions = {name for name, h in hooks.items() if "matchConditions" in h}
    assert with_conditions == {"annotate.policy-attachment.dev"}
    (condition,) = hooks["annotate.policy-attachment.dev"]["matchConditions"]
    account = k.only(docs, "ServiceAccount", "policy-webhook")["metadata"]
    username = f"system:serviceaccount:{account['namespace']}:{account['name']}"
    assert username == SERVICE_ACCOUNT
    # A CEL comparison of the request's user with that name, nothing else.
    assert condition["expression"].strip() == f"request.userInfo.username != '{username}'"
    assert condition["name"].replace("-", "").isalnum()
    # The rest of the configuration is the base's.
    base = {
        h["name"]: h
        for d in k.render("self-managed")
        if d["kind"].endswith("WebhookConfiguration")
        for h in d["webhooks"]
    }
    for name, hook in hooks.items():
        assert {f: v for f, v in hook.items() if f != "matchConditions"} == base[name]


def test_the_pod_is_spread_over_zones_with_a_critical_priority() -> None:
    pod = deployment_pod(k.render("self-managed"))
    assert pod["priorityClassName"] == "system-cluster-critical"
    (spread,) = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "topology.kubernetes.io/zone"
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway"  # one zone: both still schedule
    assert spread["maxSkew"] == 1


def test_the_priority_class_component_gives_the_pod_its_own_class() -> None:
    docs = k.render("self-managed", ["priority-class"])
    klass = k.only(docs, "PriorityClass")
    assert deployment_pod(docs)["priorityClassName"] == klass["metadata"]["name"]
    assert klass["value"] <= 1_000_000_000  # the highest a non-system class may have
    assert klass["globalDefault"] is False


def test_the_network_policy_admits_https_to_the_pods_and_lets_them_reach_the_api_server() -> None:
    docs = k.render("self-managed", ["network-policy"])
    policy = k.only(docs, "NetworkPolicy")["spec"]
    template = k.only(docs, "Deployment")["spec"]["template"]
    assert policy["podSelector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    (container,) = template["spec"]["containers"]
    (ingress,) = policy["ingress"]
    assert [p["port"] for p in ingress["ports"]] == [p["containerPort"] for p in container["ports"]]
    (egress,) = policy["egress"]
    assert {p["port"] for p in egress["ports"]} == {443, 6443}


def load_renew() -> Any:
    sys.path.insert(0, str(RENEW.parent))
    try:
        spec = importlib.util.spec_from_file_location("renew_in_cluster", RENEW)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(RENEW.parent))
    return module


def test_the_cert_renewal_cron_job_runs_the_scripts_the_image_carries() -> None:
    docs = k.render("self-managed", ["cert-renewal"])
    job = k.only(docs, "CronJob")
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (webhook,) = deployment_pod(docs)["containers"]
    assert container["image"] == webhook["image"]  # one image, pinned once
    assert job["spec"]["concurrencyPolicy"] == "Forbid"
    command = container["command"]
    assert command[0] == "python"
    script = Path(command[1])
    dockerfile = (REPO / "Dockerfile").read_text()
    assert f"/src/certs/{script.name}" in dockerfile and f"{script.parent}/" in dockerfile
    args = [a.replace("$(POD_NAMESPACE)", "policy-webhook") for a in container["args"]]
    parsed = load_renew().parse_args(args)
    assert (parsed.namespace, parsed.secret) == ("policy-webhook", "policy-webhook-tls")
    assert parsed.renew_before < parsed.days
    volumes = {v["name"]: v for v in deployment_pod(docs)["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == parsed.secret
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["runAsNonRoot"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert pod["serviceAccountName"] == "policy-webhook-certs"


def test_the_cert_renewal_identity_touches_its_own_secrets_and_configurations_only() -> None:
    docs = k.render("self-managed", ["cert-renewal"])
    role = k.only(docs, "Role", "policy-webhook-certs")
    named = [r for r in role["rules"] if r.get("resourceNames")]
    unnamed = [r for r in role["rules"] if not r.get("resourceNames")]
    assert unnamed == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}]
    (secrets,) = named
    assert sorted(secrets["resourceNames"]) == ["policy-webhook-ca", "policy-webhook-tls"]
    assert sorted(secrets["verbs"]) == ["get", "update"]
    (configs,) = k.only(docs, "ClusterRole", "policy-webhook-certs")["rules"]
    assert configs["resourceNames"] == ["policy-webhook"]
    assert sorted(configs["verbs"]) == ["get", "patch"]
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        k.only(docs, kind, "policy-webhook")
    # The webhook's own identity still reads no Secret.
    for doc in docs:
        if (
            doc["kind"] in ("ClusterRole", "Role")
            and doc["metadata"]["name"] != "policy-webhook-certs"
        ):
            for rule in doc.get("rules") or ():
                assert "secrets" not in rule["resources"], doc["metadata"]["name"]


# --- the install page ------------------------------------------------------------------------------


def test_the_install_pages_kustomization_renders_what_the_page_promises() -> None:
    docs = k.render_text(k.install_doc_kustomization())
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {
        ("CronJob", "policy-webhook-certs"),
        ("PodMonitor", "policy-webhook"),
        ("PrometheusRule", "policy-webhook"),
        ("ClusterRole", "policy-webhook-read.envoy-gateway"),
        ("ClusterRole", "policy-webhook-read.kuadrant"),
        ("ClusterRole", "policy-webhook-read.gateway-api-policies"),
    } <= kinds
    images = {
        c["image"]
        for d in docs
        if d["kind"] in ("Deployment", "CronJob")
        for c in (
            d["spec"]["template"]["spec"]["containers"]
            if d["kind"] == "Deployment"
            else d["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
        )
    }
    assert images == {"registry.example/platform/policy-webhook:0.1.0"}


def with_own_policy_kinds(text: str, lines: str) -> str:
    """The page's kustomization with its 'add your policy kinds' lines added as it says: the
    component's line under `components:`, the rest at the end."""
    body = [line for line in lines.splitlines() if not line.startswith("#")]
    component, rest = body[0], body[1:]
    out = text.splitlines()
    last = max(i for i, line in enumerate(out) if "/manifests/components/" in line)
    out.insert(last + 1, component)
    return "\n".join(out + rest) + "\n"


def test_adding_your_policy_kinds_takes_five_lines() -> None:
    lines = k.add_policy_kinds_doc_lines()
    assert len([line for line in lines.splitlines() if not line.startswith("#")]) <= 5
    docs = k.render_text(with_own_policy_kinds(k.install_doc_kustomization(), lines))
    role = k.only(docs, "ClusterRole", "policy-webhook-read.policies.acme.io")
    assert role["rules"][0]["apiGroups"] == ["policies.acme.io"]
    assert aggregated(role)


def test_the_install_pages_commands_name_what_the_manifests_make() -> None:
    page = (REPO / "docs" / "install.md").read_text()
    docs = k.render_text(k.install_doc_kustomization())
    names = {(d["kind"].lower(), d["metadata"]["name"]) for d in docs}
    for line in page.splitlines():
        if "--from=cronjob/" in line:
            words = shlex.split(line)
            cron = next(w for w in words if w.startswith("--from=cronjob/")).split("/", 1)[1]
            assert ("cronjob", cron) in names
        if line.startswith("kubectl delete validatingwebhookconfiguration"):
            assert ("validatingwebhookconfiguration", line.split()[-1]) in names
        if line.startswith("kubectl delete mutatingwebhookconfiguration"):
            assert ("mutatingwebhookconfiguration", line.split()[-1]) in names
