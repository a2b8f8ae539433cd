"""The project's own Gateway API CRDs, used when the upstream ones are not beside the repository.

A fresh clone has no ../shared, so the suite installs tests/e2e/crds/gateway-api instead. CI
has the upstream CRDs and would never exercise these: this module starts a second control plane
the way the session fixture does, with the upstream folder hidden, so the fallback cannot rot.
Where the upstream CRDs are present, the fallback is also held against them: the same kinds,
and the same stored shape for every Gateway API object of the examples.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import cluster as cluster_lib
import provision
import pytest
import yaml
from webhook_harness import EXAMPLES

if TYPE_CHECKING:
    from cluster import LocalCluster

GW = "gateway.networking.k8s.io"
MARK = "policy-attachment.dev/e2e-crds"  # the annotation every fallback CRD carries
NAMESPACE = "crd-fallback"

# One small object of each kind the fallback defines, as the suite or a user would write it.
MINIMAL = yaml.safe_load_all(f"""
apiVersion: {GW}/v1
kind: ListenerSet
metadata: {{name: extra}}
spec:
  parentRef: {{name: gw}}
  listeners: [{{name: admin, protocol: HTTP, port: 8080}}]
---
apiVersion: {GW}/v1
kind: GRPCRoute
metadata: {{name: grpc}}
spec:
  parentRefs: [{{name: gw}}]
  rules: [{{matches: [{{method: {{service: acme.Catalog}}}}], backendRefs: [{{name: foo, port: 443}}]}}]
---
apiVersion: {GW}/v1
kind: TLSRoute
metadata: {{name: tls}}
spec:
  parentRefs: [{{name: gw, sectionName: tls}}]
  hostnames: [pay.example.com]
  rules: [{{backendRefs: [{{name: pay, port: 8443}}]}}]
---
apiVersion: {GW}/v1
kind: TCPRoute
metadata: {{name: tcp}}
spec:
  parentRefs: [{{name: gw}}]
  rules: [{{backendRefs: [{{name: db, port: 5432}}]}}]
---
apiVersion: {GW}/v1
kind: UDPRoute
metadata: {{name: udp}}
spec:
  parentRefs: [{{name: gw}}]
  rules: [{{backendRefs: [{{name: dns, port: 53, weight: 0}}]}}]
---
apiVersion: {GW}/v1beta1
kind: ReferenceGrant
metadata: {{name: grant}}
spec:
  from: [{{group: {GW}, kind: HTTPRoute, namespace: other}}]
  to: [{{group: "", kind: Service}}]
---
apiVersion: {GW}/v1
kind: BackendTLSPolicy
metadata: {{name: foo-tls}}
spec:
  targetRefs: [{{group: "", kind: Service, name: foo}}]
  validation: {{hostname: foo.example.com, wellKnownCACertificates: System}}
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackendTrafficPolicy
metadata: {{name: foo-traffic}}
spec:
  targetRefs: [{{group: "", kind: Service, name: foo}}]
  retryConstraint: {{budget: {{percent: 30}}}}
---
apiVersion: {GW}/v1
kind: HTTPRoute
metadata: {{name: matches}}
spec:
  parentRefs: [{{name: gw, port: 80}}]
  rules:
  - name: api
    matches: [{{headers: [{{name: x-api, value: "1"}}], queryParams: [{{name: v, value: "2"}}], method: GET}}]
    filters: [{{type: RequestHeaderModifier, requestHeaderModifier: {{set: [{{name: x, value: y}}]}}}}]
    backendRefs: [{{name: foo, port: 80, weight: 0}}]
---
apiVersion: {GW}/v1
kind: HTTPRoute
metadata: {{name: no-rules}}
spec:
  parentRefs: [{{name: gw}}]
""")
MINIMAL_OBJECTS: list[dict[str, Any]] = [doc for doc in MINIMAL if doc]
# Gateway API objects of the example cluster (GatewayClass, Gateways, ListenerSet, routes, grant).
EXAMPLE_FILES = ("30-gateways.yaml", "40-routes.yaml", "50-referencegrants.yaml")


@pytest.fixture(scope="module")
def fallback(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LocalCluster, cluster_lib.GatewayApiCrds]]:
    """A second control plane set up as the session fixture does, upstream CRDs hidden."""
    hidden = tmp_path_factory.mktemp("no-gateway-api")  # GATEWAY_API_DIR with no channel in it
    local = cluster_lib.LocalCluster(provision.ensure_binaries())
    try:
        local.start()
        with pytest.MonkeyPatch.context() as env:
            env.setenv("GATEWAY_API_DIR", str(hidden))
            env.delenv(cluster_lib.CRD_CHOICE_ENV, raising=False)
            crds = local.install_gateway_api_crds(channel=cluster_lib.SUITE_CHANNEL)
        local.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        yield local, crds
    finally:
        if os.environ.get("E2E_KEEP_CLUSTER_DIR") == "1":
            local.stop()
            print(f"\n[e2e] kept the fallback cluster's dir: {local.workdir}")
        else:
            local.cleanup()


def test_without_upstream_crds_the_suite_installs_the_fallback_and_says_so(
    fallback: tuple[LocalCluster, cluster_lib.GatewayApiCrds],
) -> None:
    local, crds = fallback
    assert not crds.upstream
    assert crds.describe().startswith("the project's own fallback CRDs (upstream not found at ")
    installed = {
        crd["metadata"]["name"]: crd
        for crd in local.get_json("crd")["items"]
        if (crd["metadata"].get("annotations") or {}).get(MARK) == "fallback"
    }
    assert set(installed) == set(fallback_crds())
    for crd in installed.values():
        conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        assert conditions["Established"] == "True", crd["metadata"]["name"]


def test_the_fallback_defines_the_kinds_of_the_upstream_channel() -> None:
    """Same names, scope, versions (served, storage, deprecated), status and policy label."""
    upstream_dir = cluster_lib.gateway_api_dir() / cluster_lib.SUITE_CHANNEL
    if not upstream_dir.is_dir():
        pytest.skip(f"no upstream CRDs to compare with at {upstream_dir}")
    upstream = {
        crd["metadata"]["name"]: crd
        for crd in cluster_lib.load_gateway_api_crds(
            cluster_lib.GatewayApiCrds(upstream_dir, True, cluster_lib.SUITE_CHANNEL)
        )
    }
    ours = fallback_crds()
    assert set(ours) == set(upstream)
    for name, crd in ours.items():
        assert identity(crd) == identity(upstream[name]), name


def test_a_gateway_route_grant_and_backend_tls_policy_work_on_the_fallback(
    fallback: tuple[LocalCluster, cluster_lib.GatewayApiCrds],
) -> None:
    local, _ = fallback
    local.apply(f"""
apiVersion: {GW}/v1
kind: GatewayClass
metadata: {{name: fallback}}
spec: {{controllerName: example.com/fallback}}
---
apiVersion: {GW}/v1
kind: Gateway
metadata: {{name: gw, namespace: {NAMESPACE}}}
spec:
  gatewayClassName: fallback
  listeners: [{{name: http, protocol: HTTP, port: 80}}]
---
apiVersion: {GW}/v1
kind: HTTPRoute
metadata: {{name: web, namespace: {NAMESPACE}}}
spec:
  parentRefs: [{{name: gw, sectionName: http}}]
  rules: [{{name: main, backendRefs: [{{name: foo, port: 80}}]}}]
---
apiVersion: {GW}/v1beta1
kind: ReferenceGrant
metadata: {{name: grant, namespace: {NAMESPACE}}}
spec:
  from: [{{group: {GW}, kind: HTTPRoute, namespace: other}}]
  to: [{{group: "", kind: Service}}]
---
apiVersion: {GW}/v1
kind: BackendTLSPolicy
metadata: {{name: foo-tls, namespace: {NAMESPACE}}}
spec:
  targetRefs: [{{group: "", kind: Service, name: foo}}]
  validation: {{hostname: foo.example.com, wellKnownCACertificates: System}}
""")
    route = local.get_json("httproute", "web", "-n", NAMESPACE)["spec"]
    assert route["parentRefs"] == [
        {"group": GW, "kind": "Gateway", "name": "gw", "sectionName": "http"}
    ]
    assert route["rules"] == [
        {
            "name": "main",
            "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
            "backendRefs": [{"group": "", "kind": "Service", "name": "foo", "port": 80, "weight": 1}],
        }
    ]  # fmt: skip
    listener = local.get_json("gateway", "gw", "-n", NAMESPACE)["spec"]["listeners"][0]
    assert listener["allowedRoutes"] == {"namespaces": {"from": "Same"}}
    grant = local.get_json("referencegrant", "grant", "-n", NAMESPACE)["spec"]
    assert grant["to"] == [{"group": "", "kind": "Service"}]
    policy = local.get_json("backendtlspolicy", "foo-tls", "-n", NAMESPACE)["spec"]
    assert policy["targetRefs"] == [{"group": "", "kind": "Service", "name": "foo"}]
    labelled = local.get_json("crd", "-l", f"{GW}/policy")["items"]
    assert {crd["spec"]["names"]["kind"] for crd in labelled} == {
        "BackendTLSPolicy",
        "XBackendTrafficPolicy",
    }


@pytest.mark.parametrize(
    "obj", MINIMAL_OBJECTS, ids=lambda o: f"{o['kind']}-{o['metadata']['name']}"
)
def test_every_fallback_kind_takes_an_object_the_suite_would_write(
    fallback: tuple[LocalCluster, cluster_lib.GatewayApiCrds], obj: dict[str, Any]
) -> None:
    local, _ = fallback
    placed = relocated(obj)
    local.kubectl("create", "-f", "-", input=json.dumps(placed))
    stored = local.get_json(resource(placed), placed["metadata"]["name"], "-n", NAMESPACE)
    assert stored["metadata"]["uid"]


def test_the_fallback_stores_each_example_object_as_upstream_does(
    cluster: LocalCluster, fallback: tuple[LocalCluster, cluster_lib.GatewayApiCrds]
) -> None:
    """Server-side dry runs of the same objects on both servers: same spec, same status.

    Defaults, pruning and what is kept as written all show in the object a create returns.
    """
    local, _ = fallback
    route_crd = cluster.get_json("crd", f"httproutes.{GW}")
    if (route_crd["metadata"].get("annotations") or {}).get(MARK) == "fallback":
        pytest.skip("the session itself runs on the fallback CRDs: no upstream to compare with")
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    try:
        differences: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        for obj in [*example_objects(), *MINIMAL_OBJECTS]:
            placed = relocated(obj, prefix="dry-")  # not yet created by the tests above
            upstream, ours = dry_run(cluster, placed), dry_run(local, placed)
            if upstream != ours:
                differences[f"{placed['kind']}/{placed['metadata']['name']}"] = (upstream, ours)
        assert not differences, json.dumps(differences, indent=1)
    finally:
        cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")


# --- helpers -----------------------------------------------------------------------------------


def fallback_crds() -> dict[str, dict[str, Any]]:
    chosen = cluster_lib.GatewayApiCrds(cluster_lib.FALLBACK_CRD_DIR, False, "")
    return {crd["metadata"]["name"]: crd for crd in cluster_lib.load_gateway_api_crds(chosen)}


def identity(crd: dict[str, Any]) -> dict[str, Any]:
    """What a client or the webhook sees of a CRD short of its schema."""
    spec = crd["spec"]
    return {
        "group": spec["group"],
        "scope": spec["scope"],
        "names": spec["names"],
        "versions": [
            (
                v["name"],
                v["served"],
                v["storage"],
                bool(v.get("deprecated")),
                v.get("subresources") or {},
            )
            for v in spec["versions"]
        ],
        "policy": (crd["metadata"].get("labels") or {}).get(f"{GW}/policy"),
    }


def example_objects() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for name in EXAMPLE_FILES:
        docs.extend(d for d in yaml.safe_load_all((EXAMPLES / "cluster" / name).read_text()) if d)
    return docs


def relocated(obj: dict[str, Any], prefix: str = "fb-") -> dict[str, Any]:
    """The object in this module's namespace, its name prefixed (the session's may hold it)."""
    placed = copy.deepcopy(obj)
    metadata = placed["metadata"]
    metadata["name"] = prefix + metadata["name"]
    if placed["kind"] not in ("GatewayClass", "XMesh"):
        metadata["namespace"] = NAMESPACE
    return placed


def resource(obj: dict[str, Any]) -> str:
    return f"{obj['kind'].lower()}.{obj['apiVersion'].split('/')[0]}"


def dry_run(local: LocalCluster, obj: dict[str, Any]) -> dict[str, Any]:
    """What `obj` would be stored as (a server-side dry-run create), short of its metadata."""
    done = local.kubectl(
        "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(obj)
    )
    stored: dict[str, Any] = json.loads(done.stdout)
    return {key: value for key, value in stored.items() if key != "metadata"}
