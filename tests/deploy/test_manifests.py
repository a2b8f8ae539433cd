"""The deployment artefacts, checked without a cluster: kustomize output, Dockerfile, image install.

Renders each overlay with `kubectl kustomize` (client-side only) and reads the YAML the cluster
would receive; the end-to-end twin, tests/e2e/test_deploy.py, sends it to a real API server.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import venv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures.paths import REPO
from webhook.core.model.profiles import parse_config
from webhook.core.rules.ruletable import RULE_IDS

ROOT = REPO
OVERLAYS = ["cert-manager", "self-managed"]
NAMESPACE = SERVICE = SERVICE_ACCOUNT = "policy-webhook"
GATEWAY_API = "gateway.networking.k8s.io"
ROUTES = ["httproutes", "grpcroutes", "tlsroutes", "tcproutes", "udproutes"]
ANNOTATED = ["gatewayclasses", "gateways", "listenersets", *ROUTES]  # + core services
WEBHOOK_CONFIGS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
# (configuration kind, webhook name) → failurePolicy, with the reason in webhooks.yaml.
FAILURE_POLICIES = {
    ("ValidatingWebhookConfiguration", "policies.policy-attachment.dev"): "Fail",
    ("ValidatingWebhookConfiguration", "policy-deletes.policy-attachment.dev"): "Ignore",
    ("ValidatingWebhookConfiguration", "target-deletes.policy-attachment.dev"): "Ignore",
    ("MutatingWebhookConfiguration", "annotate.policy-attachment.dev"): "Ignore",
}
EXEMPT = {
    "key": "kubernetes.io/metadata.name",
    "operator": "NotIn",
    "values": ["kube-system", "policy-webhook"],
}
OPT_OUT = {"key": "policy-attachment.dev/ignore", "operator": "NotIn", "values": ["true"]}
# Timeouts by webhook: the policy webhook fails closed and is rare; the others sit on every
# Service and route write and fail open (webhooks.yaml says why).
TIMEOUTS = {
    "policies.policy-attachment.dev": 5,
    "policy-deletes.policy-attachment.dev": 2,
    "target-deletes.policy-attachment.dev": 2,
    "annotate.policy-attachment.dev": 2,
}
POLICY_WEBHOOKS = ("policies.policy-attachment.dev", "policy-deletes.policy-attachment.dev")
ALLOWED_CLUSTER_VERBS = {"get", "list", "watch", "patch"}


# --- rendering ---------------------------------------------------------------------------------


def kustomize(path: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with built-in kustomize) is not on PATH")
    result = subprocess.run(
        [kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, f"kubectl kustomize {path} failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return kustomize(ROOT / "manifests" / "overlays" / request.param)


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return kustomize(ROOT / "manifests" / "base")


def only(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def webhooks(docs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for doc in docs:
        if doc["kind"] in WEBHOOK_CONFIGS:
            for hook in doc["webhooks"]:
                yield doc["kind"], hook


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = only(docs, "Deployment", "policy-webhook")["spec"]["template"]["spec"]["containers"]
    assert isinstance(found, dict)
    return found


def env_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(docs)["env"]}


def test_every_overlay_renders_the_whole_installation(rendered: list[dict[str, Any]]) -> None:
    kinds = {d["kind"] for d in rendered}
    assert kinds >= {
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
        "ConfigMap",
        *WEBHOOK_CONFIGS,
    }
    assert {d["kind"] for d in rendered if d["kind"] == "Secret"} == set()  # never shipped


def test_namespaced_objects_live_in_the_webhook_namespace(rendered: list[dict[str, Any]]) -> None:
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", *WEBHOOK_CONFIGS}
    for doc in rendered:
        if doc["kind"] not in cluster_scoped:
            assert doc["metadata"].get("namespace") == NAMESPACE, doc["metadata"]["name"]


# --- webhook configurations --------------------------------------------------------------------


def test_webhooks_and_their_failure_policies(rendered: list[dict[str, Any]]) -> None:
    found = {(kind, hook["name"]): hook["failurePolicy"] for kind, hook in webhooks(rendered)}
    assert found == FAILURE_POLICIES


def test_every_webhook_is_side_effect_free_on_dry_runs_fast_and_v1(
    rendered: list[dict[str, Any]],
) -> None:
    for _, hook in webhooks(rendered):
        # The policy webhooks record Events (SPEC 8.2), never on a dry run; the others nothing.
        side_effects = "NoneOnDryRun" if hook["name"] in POLICY_WEBHOOKS else "None"
        assert hook["sideEffects"] == side_effects, hook["name"]
        assert hook["timeoutSeconds"] == TIMEOUTS[hook["name"]], hook["name"]
        assert hook["admissionReviewVersions"] == ["v1"], hook["name"]


def test_every_webhook_skips_kube_system_its_own_namespace_and_opted_out_ones(
    rendered: list[dict[str, Any]],
) -> None:
    for _, hook in webhooks(rendered):
        assert hook["namespaceSelector"] == {"matchExpressions": [EXEMPT, OPT_OUT]}, hook["name"]


def test_no_webhook_uses_match_conditions(rendered: list[dict[str, Any]]) -> None:
    # The end-to-end API server is v1.20; matchConditions need v1.27+.
    for _, hook in webhooks(rendered):
        assert "matchConditions" not in hook, hook["name"]


def test_every_webhook_calls_the_service_on_443(rendered: list[dict[str, Any]]) -> None:
    for kind, hook in webhooks(rendered):
        service = hook["clientConfig"]["service"]
        path = "/mutate" if kind == "MutatingWebhookConfiguration" else "/validate"
        assert service == {"name": SERVICE, "namespace": NAMESPACE, "path": path, "port": 443}


def test_no_webhook_sees_subresources(rendered: list[dict[str, Any]]) -> None:
    # `resources: ["*"]` is every resource but no subresource; "*/*" or "x/status" would send
    # status writes through the webhook (SPEC 2.7: they are always allowed).
    for _, hook in webhooks(rendered):
        for rule in hook.get("rules", ()):
            assert all("/" not in r for r in rule["resources"]), hook["name"]


def _hook(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (found,) = [hook for _, hook in webhooks(docs) if hook["name"] == name]
    return found


def test_the_policy_webhooks_rules_are_left_to_the_webhook(rendered: list[dict[str, Any]]) -> None:
    # The webhook writes them (webhook_rules); a rule in the manifest would be reset by every
    # `kubectl apply` and fought over by GitOps tools.
    for name in POLICY_WEBHOOKS:
        assert "rules" not in _hook(rendered, name), name


def test_the_file_shows_the_rules_the_webhook_writes_for_the_example_group() -> None:
    """webhooks.yaml on its own (the end-to-end suite registers it) keeps the example rules,
    in the shape the webhook writes them: writes CREATE/UPDATE, deletes DELETE, same kinds."""
    from webhook.core.model.webhook_rules import POLICY_WEBHOOKS as MANAGED

    docs = [d for d in yaml.safe_load_all((ROOT / "manifests/base/webhooks.yaml").read_text()) if d]
    hooks = {h["name"]: h for _, h in webhooks(docs)}
    for name, operations in MANAGED.items():
        (rule,) = hooks[name]["rules"]
        assert rule["operations"] == list(operations)
        assert (rule["apiGroups"], rule["resources"]) == (["policies.example.com"], ["*"])
    assert set(MANAGED) == set(POLICY_WEBHOOKS)


def test_target_deletes_cover_gateways_routes_and_services(rendered: list[dict[str, Any]]) -> None:
    rules = _hook(rendered, "target-deletes.policy-attachment.dev")["rules"]
    covered = {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    assert covered == {(GATEWAY_API, r) for r in ANNOTATED} | {("", "services")}
    assert all(rule["operations"] == ["DELETE"] for rule in rules)


def test_the_annotating_webhook_covers_what_the_reconciler_patches(
    rendered: list[dict[str, Any]],
) -> None:
    hook = _hook(rendered, "annotate.policy-attachment.dev")
    covered = {
        (g, r) for rule in hook["rules"] for g in rule["apiGroups"] for r in rule["resources"]
    }
    assert covered == {(GATEWAY_API, r) for r in ANNOTATED} | {("", "services")}
    assert all(rule["operations"] == ["CREATE", "UPDATE"] for rule in hook["rules"])
    # Its patch is idempotent: called again after another webhook's change, it answers anew.
    assert hook["reinvocationPolicy"] == "IfNeeded"
    assert covered == _patchable(rendered) - {OWN_RULES} - EVENTS


def test_cert_manager_overlay_injects_the_ca_of_the_serving_certificate() -> None:
    docs = kustomize(ROOT / "manifests" / "overlays" / "cert-manager")
    serving = [
        d
        for d in docs
        if d["kind"] == "Certificate" and d["spec"]["secretName"] == "policy-webhook-tls"
    ]
    assert len(serving) == 1
    spec = serving[0]["spec"]
    assert {
        "policy-webhook.policy-webhook.svc",
        "policy-webhook.policy-webhook.svc.cluster.local",
    } <= set(spec["dnsNames"])
    issuers = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "Issuer"}
    assert spec["issuerRef"]["name"] in issuers
    assert any("selfSigned" in s for s in issuers.values())
    reference = f"{NAMESPACE}/{serving[0]['metadata']['name']}"
    for kind in WEBHOOK_CONFIGS:
        annotations = only(docs, kind)["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == reference


def test_self_managed_overlay_leaves_the_ca_bundle_to_install_sh() -> None:
    # No caBundle in the manifests, so `kubectl apply -k` never resets the one install.sh set.
    docs = kustomize(ROOT / "manifests" / "overlays" / "self-managed")
    for _, hook in webhooks(docs):
        assert "caBundle" not in hook["clientConfig"], hook["name"]
    assert not [d for d in docs if d["kind"] in ("Certificate", "Issuer")]


# --- Deployment, Service, PodDisruptionBudget --------------------------------------------------


def test_pod_runs_as_numeric_non_root_with_the_restricted_profile(
    base: list[dict[str, Any]],
) -> None:
    pod = only(base, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container(base)["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security["runAsUser"] == 65532
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}


def test_two_replicas_spread_by_host_and_kept_by_a_budget(base: list[dict[str, Any]]) -> None:
    deployment = only(base, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    (term,) = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= pod_labels.items()
    budget = only(base, "PodDisruptionBudget")["spec"]
    assert budget["minAvailable"] == 1
    assert budget["selector"]["matchLabels"].items() <= pod_labels.items()


def test_probes_use_https_readyz_and_healthz(base: list[dict[str, Any]]) -> None:
    main = container(base)
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = main[probe]["httpGet"]
        assert (get["path"], get["scheme"]) == (path, "HTTPS")
        assert ports[get["port"]] == 8443


def test_grace_period_covers_the_pre_stop_sleep_and_the_drain(base: list[dict[str, Any]]) -> None:
    pod = only(base, "Deployment")["spec"]["template"]["spec"]
    command = container(base)["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    pre_stop, drain = int(command[1]), int(env_of(base)["POLICY_WEBHOOK_DRAIN_SECONDS"])
    assert pre_stop >= 3  # long enough for the endpoints to drop the pod
    assert pre_stop + drain < pod["terminationGracePeriodSeconds"]


def test_container_has_resources_tls_config_tmp_and_downward_api(
    base: list[dict[str, Any]],
) -> None:
    main = container(base)
    for side in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(main["resources"][side]), side
    mounts = {m["mountPath"]: m for m in main["volumeMounts"]}
    volumes = {
        v["name"]: v for v in only(base, "Deployment")["spec"]["template"]["spec"]["volumes"]
    }
    assert mounts["/tls"]["readOnly"] is True
    assert volumes[mounts["/tls"]["name"]]["secret"]["secretName"] == "policy-webhook-tls"
    assert mounts["/config"]["readOnly"] is True
    config_map = volumes[mounts["/config"]["name"]]["configMap"]["name"]
    assert config_map.startswith("policy-webhook-config")
    only(base, "ConfigMap", config_map)  # the generated name is the one mounted
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]
    assert all("subPath" not in m for m in mounts.values())  # subPath mounts never update
    env = env_of(base)
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["POLICY_WEBHOOK_TLS_CERT_FILE"] == "/tls/tls.crt"
    assert env["POLICY_WEBHOOK_TLS_KEY_FILE"] == "/tls/tls.key"
    assert env["POLICY_WEBHOOK_CONFIG"].startswith("/config/")


def test_service_maps_443_to_the_https_container_port(base: list[dict[str, Any]]) -> None:
    (port,) = only(base, "Service")["spec"]["ports"]
    assert port["port"] == 443
    names = {p["name"]: p["containerPort"] for p in container(base)["ports"]}
    assert names[port["targetPort"]] == 8443
    pod_labels = only(base, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert only(base, "Service")["spec"]["selector"].items() <= pod_labels.items()


def test_shipped_config_is_accepted_by_the_webhook(base: list[dict[str, Any]]) -> None:
    data = only(base, "ConfigMap")["data"]
    (name,) = data
    assert env_of(base)["POLICY_WEBHOOK_CONFIG"] == f"/config/{name}"
    parse_config(yaml.safe_load(data[name]), known_rules=RULE_IDS)
    # The commented example profile is valid too once uncommented, as an operator would.
    lines = data[name].splitlines()
    start = lines.index("# kinds:")
    example = [line[2:] for line in lines[start:] if line.startswith("# ")]
    config = parse_config(yaml.safe_load("\n".join(example)), known_rules=RULE_IDS)
    assert [(gk.group, gk.kind) for gk in config.kinds] == [("policies.example.com", "RetryPolicy")]


def test_every_env_flag_is_a_flag_of_serve(base: list[dict[str, Any]]) -> None:
    """The Deployment configures `serve` through POLICY_WEBHOOK_<FLAG>; each must exist."""
    from webhook.shell.cli.main import build_parser, env_name

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    known = {
        env_name(option)
        for action in commands.choices["serve"]._actions
        for option in action.option_strings
        if option.startswith("--")
    }
    wanted = {name for name in env_of(base) if name.startswith("POLICY_WEBHOOK_")}
    assert wanted - known == set()


def test_the_deployment_env_gives_serve_the_intended_settings(
    base: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parse `serve` with exactly the Deployment's environment, as the container would."""
    from webhook.shell.cli.main import build_parser

    for name, value in env_of(base).items():
        if isinstance(value, str):  # $(POD_NAMESPACE) is expanded by the kubelet
            monkeypatch.setenv(name, value.replace("$(POD_NAMESPACE)", NAMESPACE))
    parser = build_parser()
    args = parser.parse_args(container(base)["args"])
    assert args.command == "serve"
    assert (args.host, args.port) == ("0.0.0.0", 8443)
    assert (args.tls_cert_file, args.tls_key_file) == ("/tls/tls.crt", "/tls/tls.key")
    assert args.config.startswith("/config/")
    assert (args.leader_election_namespace, args.leader_election_name) == (
        NAMESPACE,
        "policy-webhook",
    )
    assert args.drain_seconds == 15
    assert not args.manifests  # state from the cluster
    # argparse checks `choices` only for values given on the command line, not for defaults
    # taken from the environment: check them here.
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for action in commands.choices["serve"]._actions:
        if action.choices is not None:
            assert getattr(args, action.dest) in action.choices, action.dest


# --- RBAC --------------------------------------------------------------------------------------


def _patchable(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    rules = only(docs, "ClusterRole", "policy-webhook")["rules"]
    return {
        (g, r)
        for rule in rules
        if "patch" in rule["verbs"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }


OWN_RULES = ("admissionregistration.k8s.io", "validatingwebhookconfigurations")
SELF_REVIEWS = ("authorization.k8s.io", ("selfsubjectrulesreviews", "selfsubjectaccessreviews"))
EVENTS = {("events.k8s.io", "events"), ("", "events")}


def test_cluster_role_reads_and_patches_only(base: list[dict[str, Any]]) -> None:
    for rule in only(base, "ClusterRole", "policy-webhook")["rules"]:
        assert "secrets" not in rule["resources"], rule
        assert "nonResourceURLs" not in rule, rule
        assert "*" not in rule["apiGroups"], rule
        if (rule["apiGroups"][0], tuple(rule["resources"])) == SELF_REVIEWS:
            assert rule["verbs"] == ["create"]  # asks what it may do; changes nothing
        elif rule["resources"] == ["events"]:
            assert rule["verbs"] == ["create", "patch"]  # writes its own Events, reads none
        else:
            assert set(rule["verbs"]) <= ALLOWED_CLUSTER_VERBS, rule


def test_cluster_role_patches_exactly_the_annotated_kinds_and_its_own_webhook_rules(
    base: list[dict[str, Any]],
) -> None:
    own = OWN_RULES
    assert _patchable(base) == {(GATEWAY_API, r) for r in ANNOTATED} | {("", "services"), own} | (
        EVENTS  # the series count of its own Events (SPEC 8.2)
    )
    (rule,) = [
        r
        for r in only(base, "ClusterRole", "policy-webhook")["rules"]
        if r["resources"] == [own[1]]
    ]
    assert rule["resourceNames"] == ["policy-webhook"]
    assert sorted(rule["verbs"]) == ["get", "patch"]
    assert env_of(base)["POLICY_WEBHOOK_WEBHOOK_CONFIGURATION"] == "policy-webhook"
    only(base, "ValidatingWebhookConfiguration", "policy-webhook")


def test_policies_are_read_through_an_aggregated_cluster_role(base: list[dict[str, Any]]) -> None:
    role = only(base, "ClusterRole", "policy-webhook-policies")
    assert role["aggregationRule"] == {
        "clusterRoleSelectors": [
            {"matchLabels": {"policy-attachment.dev/aggregate-to-policy-webhook": "true"}}
        ]
    }
    # No `rules`: the controller fills them, and apply must never reset them to nothing.
    assert "rules" not in role
    binding = only(base, "ClusterRoleBinding", "policy-webhook-policies")
    assert binding["roleRef"]["name"] == "policy-webhook-policies"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}
    ]


def test_cluster_role_reads_what_the_webhook_watches(base: list[dict[str, Any]]) -> None:
    rules = only(base, "ClusterRole", "policy-webhook")["rules"]
    readable = {
        (g, r)
        for rule in rules
        if {"get", "list", "watch"} <= set(rule["verbs"]) and not rule.get("resourceNames")
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    wanted = {
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        ("", "services"),
        ("", "namespaces"),
        (GATEWAY_API, "referencegrants"),
        ("policies.example.com", "*"),
    }
    wanted |= {(GATEWAY_API, r) for r in ANNOTATED}
    assert readable == wanted


def test_leases_only_in_its_own_namespace_and_only_its_own(base: list[dict[str, Any]]) -> None:
    role = only(base, "Role", "policy-webhook-leader-election")
    assert role["metadata"]["namespace"] == NAMESPACE
    verbs: dict[str, set[str]] = {}
    for rule in role["rules"]:
        assert (rule["apiGroups"], rule["resources"]) == (["coordination.k8s.io"], ["leases"])
        for verb in rule["verbs"]:
            verbs[verb] = set(rule.get("resourceNames", ["*"]))
    lease = env_of(base)["POLICY_WEBHOOK_LEADER_ELECTION_NAME"]
    assert verbs == {"create": {"*"}, "get": {lease}, "update": {lease}}


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("ClusterRoleBinding", "policy-webhook"),
        ("ClusterRoleBinding", "policy-webhook-policies"),
        ("RoleBinding", "policy-webhook-leader-election"),
    ],
)
def test_bindings_name_the_service_account(
    base: list[dict[str, Any]], kind: str, name: str
) -> None:
    binding = only(base, kind, name)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}
    ]
    role_kind = "ClusterRole" if kind == "ClusterRoleBinding" else "Role"
    assert binding["roleRef"]["kind"] == role_kind
    only(base, role_kind, binding["roleRef"]["name"])
    deployment = only(base, "Deployment")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == SERVICE_ACCOUNT


# --- image -------------------------------------------------------------------------------------


def dockerfile_stages() -> list[list[str]]:
    """Instructions per stage, continuation lines joined, comments dropped."""
    text = (ROOT / "Dockerfile").read_text()
    logical = re.sub(
        r"\\\n",
        " ",
        "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")),
    )
    stages: list[list[str]] = []
    for line in filter(None, (ln.strip() for ln in logical.splitlines())):
        if line.upper().startswith("FROM "):
            stages.append([])
        elif stages:
            stages[-1].append(line)
    return stages


def dockerfile_base() -> str:
    """The value of `ARG BASE`, which every stage starts FROM."""
    (base,) = re.findall(r"^ARG BASE=(\S+)$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    return str(base)


def test_dockerfile_is_multi_stage_from_python_slim_pinned_by_digest() -> None:
    froms = re.findall(r"^FROM\s+(\S+)", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert len(froms) >= 2
    assert all(image.startswith("${BASE}") for image in froms)
    image, _, digest = dockerfile_base().partition("@")
    assert image.startswith("python:3.11-slim")
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), "pinned by an image index digest"


def test_dependencies_come_from_the_hash_locked_file_only() -> None:
    builder = " ".join(dockerfile_stages()[0])
    assert "pip install --no-cache-dir --require-hashes --no-deps -r requirements.lock" in builder
    # Our own wheel: built with the locked backend, installed without any index.
    assert "--no-build-isolation" in builder
    assert "install --no-cache-dir --no-deps --no-index /wheels/*.whl" in builder


def test_the_lock_pins_every_dependency_with_hashes() -> None:
    text = (ROOT / "requirements.lock").read_text()
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\$", text, re.MULTILINE)
    names = {name.lower().replace("_", "-") for name, _ in pins}
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    direct = {
        re.split(r"[<>=!~\[ ]", spec, maxsplit=1)[0].lower()
        for spec in project["project"]["dependencies"] + project["build-system"]["requires"]
    }
    assert direct <= names, direct - names
    blocks = lock_blocks()
    assert len(blocks) == len(pins)
    for block in blocks:
        assert "--hash=sha256:" in block, block.splitlines()[0]
    assert "file://" not in text and "--index-url" not in text  # no index of this machine


def test_image_carries_oci_labels_from_build_arguments() -> None:
    final = " ".join(dockerfile_stages()[-1])
    for label, arg in (("source", "SOURCE"), ("version", "VERSION"), ("revision", "REVISION")):
        assert f'org.opencontainers.image.{label}="${{{arg}}}"' in final
        assert f"ARG {arg}" in final
    assert "POLICY_WEBHOOK_BUILD_REVISION=${REVISION}" in final


def test_final_stage_runs_as_numeric_non_root_user() -> None:
    users = [line.split()[1] for line in dockerfile_stages()[-1] if line.upper().startswith("USER")]
    assert users, "the final stage sets no USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0
    assert not gid or (gid.isdigit() and int(gid) != 0)


def test_no_pip_install_keeps_a_cache() -> None:
    for stage in dockerfile_stages():
        for line in stage:
            for command in re.split(r"&&|;", line):
                if re.search(r"\bpip\b.*\binstall\b", command):
                    assert "--no-cache-dir" in command, command


def test_final_stage_only_copies_the_venv_and_the_cert_scripts() -> None:
    final = dockerfile_stages()[-1]
    assert not [line for line in final if line.upper().startswith(("RUN ", "ADD "))]
    assert [line for line in final if line.upper().startswith("COPY")] == [
        "COPY --from=builder /opt/venv /opt/venv",
        "COPY --from=builder /src/certs/generate.py /src/certs/renew_in_cluster.py "
        "/opt/policy-webhook/certs/",
    ]
    assert 'ENTRYPOINT ["policy-webhook"]' in final
    assert 'CMD ["serve"]' in final
    assert "EXPOSE 8443" in final
    assert not [line for line in final if line.upper().startswith("HEALTHCHECK")]


def test_dockerignore_keeps_venv_git_and_keys_out() -> None:
    patterns = {
        line.strip().rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".venv", ".git", "certs/out", ".pytest_cache", "bench/out"} <= patterns


def image_build_tools() -> list[str]:
    """What the builder stage uninstalls before `pip check`: the tools of the build only."""
    builder = " ".join(dockerfile_stages()[0])
    found = re.search(r"pip uninstall --yes ([^&]+?) && /opt/venv/bin/pip check", builder)
    assert found, "the builder stage removes no build tool before `pip check`"
    return found.group(1).split()


def lock_blocks() -> list[str]:
    """requirements.lock, one block per pinned package: its pin, hashes and `# via` lines."""
    text = (ROOT / "requirements.lock").read_text()
    return re.split(r"^(?=[A-Za-z0-9_.-]+==)", text, flags=re.MULTILINE)[1:]


def lock_build_only() -> set[str]:
    """The lock's packages that only the build needs: those that pip-compile's `# via` lines
    trace to `build-system.requires` alone, never to the package's own dependencies."""
    vias: dict[str, set[str]] = {}
    for block in lock_blocks():
        comments = (line.strip().lstrip("#").strip() for line in block.splitlines()[1:])
        vias[block.split("==", 1)[0].lower()] = {
            c.removeprefix("via").strip() for c in comments if c not in ("", "via")
        }
    needed = {
        name for name, via in vias.items() if "policy-attachment-webhook (pyproject.toml)" in via
    }
    while more := {name for name, via in vias.items() if via & needed} - needed:
        needed |= more  # what a package needed at run time needs is needed too
    return set(vias) - needed


def test_the_image_compiles_the_core_and_keeps_no_build_tool() -> None:
    builder = " ".join(" ".join(dockerfile_stages()[0]).split())
    assert "POLICY_WEBHOOK_COMPILE=1 /opt/venv/bin/pip wheel" in builder
    assert "apt-get install -y --no-install-recommends gcc libc6-dev" in builder
    assert 'policy-webhook version | grep -q "core compiled"' in builder
    # Every package the lock has only for the build goes, and nothing the webhook needs.
    build_only = lock_build_only()
    assert {"mypy", "setuptools", "wheel"} <= build_only
    assert set(image_build_tools()) == build_only


def test_the_image_install_steps_work_in_a_fresh_venv(tmp_path: Path) -> None:
    """What the builder stage does, step by step: the lock with its hashes into a new venv,
    the repository's wheel built with the locked backend and its core compiled (gcc here, as
    in the builder), installed without an index, the build's tools removed; what is left
    runs, and runs the compiled core.

    The lock's files come from the package index (or pip's cache), as in the image build; a
    hash that does not match a file the index serves fails here as it would there.
    """
    venv.create(tmp_path / "venv", with_pip=True, clear=True)
    bin_dir = tmp_path / "venv" / "bin"
    quiet = ["--disable-pip-version-check", "-q"]

    def pip(*args: str, env: dict[str, str] | None = None) -> None:
        done = subprocess.run(
            [str(bin_dir / "pip"), *args],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
            env={**os.environ, **(env or {})},
        )
        assert done.returncode == 0, done.stderr

    # --no-compile: byte-compiling is the image build's concern and costs ~10 s here.
    pip("install", *quiet, "--no-compile", "--require-hashes", "--no-deps",
        "-r", str(ROOT / "requirements.lock"))  # fmt: skip
    pip("wheel", *quiet, "--no-deps", "--no-build-isolation", "--wheel-dir",
        str(tmp_path / "wheels"), str(ROOT), env={"POLICY_WEBHOOK_COMPILE": "1"})  # fmt: skip
    (wheel,) = (tmp_path / "wheels").glob("policy_attachment_webhook-*.whl")
    pip("install", *quiet, "--no-compile", "--no-deps", "--no-index", str(wheel))
    pip("uninstall", *quiet, "--yes", *image_build_tools())
    pip("check")  # the lock holds every dependency the package declares, and no build tool

    def installed(program: str, *args: str) -> str:
        """What a program of the new venv prints, run outside this checkout."""
        done = subprocess.run(
            [str(bin_dir / program), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert json.loads(installed("policy-webhook", "version", "-o", "json"))["core"] == "compiled"
    assert "serve" in installed("policy-webhook", "--help")
    installed("policy-webhook", "serve", "--help")
    installed("python", str(ROOT / "certs" / "renew_in_cluster.py"), "--help")
    # The package is imported from the venv, not from this checkout.
    where = installed("python", "-c", "import webhook; print(webhook.__file__)")
    assert str(tmp_path / "venv") in where


def test_events_are_created_and_patched_in_both_groups_and_nothing_more(
    base: list[dict[str, Any]],
) -> None:
    rules = [
        rule
        for rule in only(base, "ClusterRole", "policy-webhook")["rules"]
        if "events" in rule["resources"]
    ]
    granted = {
        (g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]
        for v in rule["verbs"]
    }  # fmt: skip
    assert granted == {(g, r, v) for g, r in EVENTS for v in ("create", "patch")}
    assert all(not rule.get("resourceNames") for rule in rules)  # Events get new names
