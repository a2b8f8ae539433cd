"""Real vendors' policies through the real API server and `kubectl` (SPEC's first principle).

CRDs shaped like Envoy Gateway's, Kuadrant's, NGINX Gateway Fabric's, kgateway's, Linkerd's and Envoy AI Gateway's (scope,
versions and labels as upstream: `tests/realworld/crds/`; Gateway API's own kinds come from
the suite's Gateway API CRDs) and the objects their published policies target
(`tests/realworld/state.yaml`). The webhook runs in cluster mode, registered with the shipped
configurations plus the vendors' groups in its policy rules, as an admin adds them.

Every published shape of `tests/realworld/cases.yaml` is applied with `--dry-run=server`, so
each is judged alone against the same state, through the webhook, and not stored: admitted
ones must be admitted with exactly the expected warnings, forbidden ones denied. Then one
`targetSelectors` policy is applied for real, and its route's annotation follows the route's
label as it comes and goes.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from webhook_harness import REPO, WebhookProcess, kubectl, registered

from webhook.core.model.settings import Settings

if TYPE_CHECKING:
    from cluster import LocalCluster

REALWORLD = REPO / "tests" / "realworld"
# Every vendor's CRD file but Gateway API's own: the suite installs upstream's (or its own).
VENDOR_CRDS = tuple(
    sorted(p.stem for p in (REALWORLD / "crds").glob("*.yaml") if p.stem != "gateway-api")
)
# The Gateway API's own policy kinds, named one by one: its groups hold the routes too.
GATEWAY_API_POLICIES = [
    {"apiGroups": ["gateway.networking.k8s.io"], "resources": ["backendtlspolicies"]},
    {"apiGroups": ["gateway.networking.x-k8s.io"], "resources": ["xbackendtrafficpolicies"]},
]
CASES: list[dict[str, Any]] = yaml.safe_load((REALWORLD / "cases.yaml").read_text())
ANNOTATION = Settings().annotation_key
RULE = re.compile(r"\[(PA-[A-Z]\d\d)\]")
LEASE = "e2e-vendors"


def vendor_crds() -> list[dict[str, Any]]:
    return [
        doc
        for name in VENDOR_CRDS
        for doc in yaml.safe_load_all((REALWORLD / "crds" / f"{name}.yaml").read_text())
        if doc
    ]


# The groups of those CRDs: the policy webhooks' rules gain each, as an admin's component adds it.
VENDOR_GROUPS = sorted({crd["spec"]["group"] for crd in vendor_crds()})


def with_vendor_groups(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The policy webhooks' rules widened to the vendors' groups (what issue-16's component
    does for an admin); only the rules of webhooks that judge policies change."""
    for config in configs:
        for hook in config["webhooks"]:
            for rule in list(hook["rules"]):
                if rule["apiGroups"] == ["policies.example.com"]:
                    rule["apiGroups"] = ["policies.example.com", *VENDOR_GROUPS]
                    hook["rules"] += [{**rule, **extra} for extra in GATEWAY_API_POLICIES]
    return configs


@pytest.fixture(scope="module")
def vendors(
    cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebhookProcess]:
    crds = vendor_crds()
    cluster.apply(crds)
    for crd in crds:
        cluster.kubectl(
            "wait", "--for=condition=Established", f"crd/{crd['metadata']['name']}", "--timeout=30s"
        )
    cluster.kubectl("apply", "-f", str(REALWORLD / "state.yaml"))
    process = WebhookProcess(
        cluster, tmp_path_factory.mktemp("vendors"), args=["--leader-election-name", LEASE]
    )
    process.start()
    try:
        with registered(cluster, process, suffix="vendors", adapt=with_vendor_groups):
            yield process
    finally:
        process.stop()
        print(f"\n[e2e] webhook log: {process.log_path}")
        cluster.kubectl("delete", "-f", str(REALWORLD / "state.yaml"), "--ignore-not-found",
                        "--wait=false", check=False)  # fmt: skip
        for crd in crds:
            cluster.kubectl("delete", "crd", crd["metadata"]["name"], "--ignore-not-found",
                            "--wait=false", check=False)  # fmt: skip


def expected(case: dict[str, Any]) -> set[str]:
    return set(case["expect"]["rules"])


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_a_published_policy_meets_the_webhook_as_the_table_says(
    cluster: LocalCluster, vendors: WebhookProcess, case: dict[str, Any]
) -> None:
    namespace = case.get("namespace", "default")
    done = kubectl(
        cluster, "apply", "--dry-run=server", "-n", namespace, "-f", "-",
        input=yaml.safe_dump(case["policy"]),
    )  # fmt: skip
    said = set(RULE.findall(done.stderr)) - {"PA-C04"}
    if case["expect"]["verdict"] == "denied":
        assert done.returncode == 1, done.stdout
        if not said:
            # The vendor's own schema refused it before any webhook: not a denial of ours,
            # and still refused (the table's note on the case says why).
            assert "note" in case, done.stderr
            return
        # 422 Invalid with causes: kubectl prints them as its own field errors.
        assert f'The {case["policy"]["kind"]} "' in done.stderr and "is invalid" in done.stderr
        assert said == expected(case), done.stderr
    else:
        assert done.returncode == 0, done.stderr  # never a false denial
        assert said == expected(case), done.stderr
        if case["expect"]["verdict"] == "allowed":
            assert not [w for w in done.stderr.splitlines() if "[PA-" in w and "PA-C04" not in w]


SELECTOR_POLICY = """
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: e2e-by-label, namespace: httpbin}
spec:
  targetSelectors:
  - kind: HTTPRoute
    matchLabels: {e2e-retries: "on"}
  retry: {numRetries: 7}
"""


def annotation_of(cluster: LocalCluster, resource: str, namespace: str) -> dict[str, Any] | None:
    obj = cluster.get_json(resource, "-n", namespace)
    value = (obj["metadata"].get("annotations") or {}).get(ANNOTATION)
    return json.loads(value) if value else None


def reaches(value: dict[str, Any] | None) -> bool:
    entry = (value or {}).get("policies", {}).get("BackendTrafficPolicy.gateway.envoyproxy.io")
    return entry is not None and "httpbin/e2e-by-label" in entry["policies"]


def eventually(check: Any, *, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.3)


def test_a_selector_policy_follows_its_routes_label(
    cluster: LocalCluster, vendors: WebhookProcess
) -> None:
    route = first_route_in(cluster, "httpbin")
    kubectl(cluster, "label", route, "-n", "httpbin", "e2e-retries-", "--overwrite")
    done = kubectl(cluster, "apply", "-f", "-", input=SELECTOR_POLICY)
    assert done.returncode == 0, done.stderr
    assert "[PA-T06] spec.targetSelectors[0]" in done.stderr  # no route carries the label yet
    try:
        assert not reaches(annotation_of(cluster, route, "httpbin"))
        assert kubectl(cluster, "label", route, "-n", "httpbin", "e2e-retries=on").returncode == 0
        eventually(lambda: reaches(annotation_of(cluster, route, "httpbin")))
        value = annotation_of(cluster, route, "httpbin") or {}
        (context, *_) = value["policies"]["BackendTrafficPolicy.gateway.envoyproxy.io"]["contexts"]
        assert context["effective"]["retry"] == {"numRetries": 7}
        assert kubectl(cluster, "label", route, "-n", "httpbin", "e2e-retries-").returncode == 0
        eventually(lambda: not reaches(annotation_of(cluster, route, "httpbin")))
    finally:
        kubectl(cluster, "delete", "-f", "-", "--ignore-not-found", input=SELECTOR_POLICY)


def upstream_settings(name: str, settings: str) -> str:
    return f"""
apiVersion: gateway.nginx.org/v1alpha1
kind: UpstreamSettingsPolicy
metadata: {{name: {name}, namespace: default}}
spec:
  targetRefs: [{{group: core, kind: Service, name: backend}}]
  {settings}
"""


# Named in the order they are applied: two applied within one second tie on age, and SPEC
# §4.4 then orders them by name.
ZONE = upstream_settings("e2e-a-zone", "zoneSize: 1m")
KEEPALIVE = upstream_settings("e2e-b-keepalive", "keepAlive: {connections: 32}")
ZONE_AGAIN = upstream_settings("e2e-c-zone", "zoneSize: 2m")


def test_nginx_policies_on_one_service_merge_unless_they_set_the_same_field(
    cluster: LocalCluster, vendors: WebhookProcess
) -> None:
    """NGINX Gateway Fabric's own rule for policies on one target (catalog `conflict_keys`)."""
    try:
        assert kubectl(cluster, "apply", "-f", "-", input=ZONE).returncode == 0
        done = kubectl(cluster, "apply", "-f", "-", input=KEEPALIVE)
        assert done.returncode == 0, done.stderr
        assert "PA-C01" not in done.stderr  # different fields: NGINX applies both
        done = kubectl(cluster, "apply", "-f", "-", input=ZONE_AGAIN)
        assert done.returncode == 0, done.stderr  # a warning, never a denial
        # Applied within the same second or not, the older (or first by name) one wins.
        assert (
            "Warning: [PA-C01] spec.targetRefs[0]: e2e-a-zone also sets zoneSize on it and wins ("
            in done.stderr
        )
        assert "): this one is Conflicted\n" in done.stderr

        def merged() -> bool:
            value = annotation_of(cluster, "service/backend", "default") or {}
            entry = value.get("policies", {}).get("UpstreamSettingsPolicy.gateway.nginx.org")
            return entry is not None and entry["contexts"][0]["effective"] == {
                "zoneSize": "1m",
                "keepAlive": {"connections": 32},
            }

        eventually(merged)
    finally:
        for text in (ZONE, KEEPALIVE, ZONE_AGAIN):
            kubectl(cluster, "delete", "-f", "-", "--ignore-not-found", input=text)


def first_route_in(cluster: LocalCluster, namespace: str) -> str:
    routes = cluster.get_json("httproutes.gateway.networking.k8s.io", "-n", namespace)["items"]
    assert routes, f"tests/realworld/state.yaml has no HTTPRoute in {namespace}"
    return f"httproute.gateway.networking.k8s.io/{routes[0]['metadata']['name']}"


def test_no_vendor_policy_was_left_behind(cluster: LocalCluster, vendors: WebhookProcess) -> None:
    """The dry runs stored nothing: the table judged each shape alone, as it says."""
    for crd in vendor_crds():
        plural = crd["spec"]["names"]["plural"]
        group = crd["spec"]["group"]
        if crd["spec"]["names"]["kind"] == "Backend":
            continue
        assert cluster.get_json(f"{plural}.{group}", "-A")["items"] == [], plural
