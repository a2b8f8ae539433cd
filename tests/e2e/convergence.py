"""Is every annotation right? The end-to-end suite's one answer, for the reconciler, fault and
soak tests.

"Right" means equal to a fresh computation: `webhook.core.annotation.summary` over a store filled from
`kubectl get -o json` of the same objects, in one snapshot. Each module names the objects it
owns with a `watched` predicate (the session's cluster holds other modules' objects, whose
annotations are none of its business). Also here: metrics of a running webhook, bounded waits,
and a small world of one's own (a GatewayClass, a Gateway, routes, Services and policies).
"""

from __future__ import annotations

import asyncio
import copy
import re
import time
import uuid
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING, Any

import yaml
from webhook_harness import EXAMPLES

from webhook.core.annotation import summary
from webhook.core.model import kinds
from webhook.core.model.refs import ObjectKey, key_of
from webhook.core.model.settings import Settings
from webhook.core.state.store import Store
from webhook.shell.cluster import kubeapi
from webhook.shell.cluster.kubeapi import connect, request_json

if TYPE_CHECKING:
    from cluster import LocalCluster
    from webhook_harness import WebhookProcess

SETTINGS = Settings()
KEY = SETTINGS.annotation_key
GW = "gateway.networking.k8s.io"
POLICY_GROUP = "policies.example.com"
GATEWAY_RESOURCES = [
    f"{plural}.{GW}"
    for plural in (
        "gatewayclasses", "gateways", "listenersets", "httproutes", "grpcroutes", "tlsroutes",
        "tcproutes", "udproutes", "referencegrants",
    )
]  # fmt: skip
CONVERGE_S = 30.0

Watched = Callable[[ObjectKey], bool]


# --- reading the cluster ------------------------------------------------------------------------


def cluster_state(cluster: LocalCluster) -> list[dict[str, Any]]:
    """Policy CRDs, Namespaces, Services, Gateway API objects and every policy, as JSON."""
    crds = cluster.get_json("crd", "-l", f"{GW}/policy")["items"]
    policies = [f"{c['spec']['names']['plural']}.{c['spec']['group']}" for c in crds]
    resources = ",".join(["namespaces", "services", *GATEWAY_RESOURCES, *policies])
    items: list[dict[str, Any]] = cluster.get_json(resources, "-A")["items"]
    return [*crds, *items]


def in_namespaces(namespaces: Collection[str], *cluster_scoped: ObjectKey) -> Watched:
    """A `watched` predicate: annotated objects in these namespaces, and these cluster-scoped ones."""

    def watched(key: ObjectKey) -> bool:
        return key.group_kind in kinds.ANNOTATED_KINDS and (
            key.namespace in namespaces or key in cluster_scoped
        )

    return watched


def annotation_of(obj: dict[str, Any]) -> str | None:
    value = (obj["metadata"].get("annotations") or {}).get(KEY)
    return value if isinstance(value, str) else None


def compare(
    cluster: LocalCluster, watched: Watched
) -> tuple[dict[ObjectKey, str | None], dict[ObjectKey, str | None]]:
    """(annotation on each watched object, a fresh computation of it) from one snapshot."""
    store = Store()
    actual: dict[ObjectKey, str | None] = {}
    for obj in cluster_state(cluster):
        key = store.upsert(obj)
        if key is not None and watched(key):
            actual[key] = annotation_of(obj)
    expected = {key: summary.summarize(key, store, SETTINGS) for key in actual}
    return actual, expected


def wrong(cluster: LocalCluster, watched: Watched) -> dict[str, tuple[str | None, str | None]]:
    """Watched objects whose annotation differs from a fresh computation: (actual, expected)."""
    actual, expected = compare(cluster, watched)
    return {str(k): (actual[k], expected[k]) for k in actual if actual[k] != expected[k]}


def converge(cluster: LocalCluster, watched: Watched, timeout: float = CONVERGE_S) -> float:
    """Seconds until every watched annotation equals a fresh computation; fails after timeout."""
    started = time.monotonic()
    differences: dict[str, Any] = {}
    while time.monotonic() - started < timeout:
        differences = wrong(cluster, watched)
        if not differences:
            return time.monotonic() - started
        time.sleep(0.25)
    raise AssertionError(f"not converged after {timeout}s: {sorted(differences)}")


def snapshot(cluster: LocalCluster, watched: Watched) -> dict[str, Any]:
    """Every watched object minus what any write changes (resourceVersion, managedFields)."""
    out = {}
    for obj in cluster_state(cluster):
        key = key_of(obj)
        if key is not None and watched(key):
            obj = copy.deepcopy(obj)
            for field in ("resourceVersion", "managedFields", "generation"):
                obj["metadata"].pop(field, None)
            out[str(key)] = obj
    return out


def without_ours(objects: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(objects)
    for obj in out.values():
        annotations = obj["metadata"].get("annotations") or {}
        annotations.pop(KEY, None)
        if not annotations:
            obj["metadata"].pop("annotations", None)
    return out


def wait_for_annotation(
    cluster: LocalCluster,
    path: str,
    check: Callable[[str | None], bool],
    *,
    change: Callable[[], object] | None = None,
    timeout: float = 20.0,
) -> tuple[float, float]:
    """Run `change` (kubectl, in a thread) and poll the object at `path` through the API every
    10 ms (kubectl would add ~100 ms per look) until its annotation passes `check`.

    Returns (seconds the change took, seconds from its start until the annotation passed).
    """

    async def poll() -> tuple[float, float]:
        api = await connect(str(cluster.kubeconfig))
        try:
            started = time.monotonic()
            done = started
            if change is not None:
                await asyncio.to_thread(change)
                done = time.monotonic()
            async with asyncio.timeout(timeout):
                while not check(annotation_of(await request_json(api, "GET", path))):
                    await asyncio.sleep(0.01)
            return done - started, time.monotonic() - started
        finally:
            await kubeapi.close(api)

    return asyncio.run(poll())


# --- a running webhook --------------------------------------------------------------------------

_SAMPLE = re.compile(r"^(policy_webhook_[a-z_]+)(?:\{([^}]*)\})? ([0-9.e+-]+|[+-]Inf|NaN)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def samples(process: WebhookProcess, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of one metric of a running webhook: (labels, value)."""
    status, text = process.get("/metrics")
    assert status == 200, text
    out = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and match.group(1) == name:
            out.append((dict(_LABEL.findall(match.group(2) or "")), float(match.group(3))))
    return out


def metric(process: WebhookProcess, name: str, **labels: str) -> float:
    """The sum over the samples of one metric whose labels include `labels` (0 when none)."""
    return sum(
        value
        for found, value in samples(process, name)
        if all(found.get(k) == v for k, v in labels.items())
    )


def patches(process: WebhookProcess) -> int:
    return int(metric(process, "policy_webhook_reconcile_patches_total"))


def skips(process: WebhookProcess) -> int:
    return int(metric(process, "policy_webhook_reconcile_skips_total"))


def leading(process: WebhookProcess) -> bool:
    return metric(process, "policy_webhook_leader") == 1.0


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds until `check()` holds, polled every 0.1 s; fails after `timeout`."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.1)
    return time.monotonic() - started


# --- writing the cluster ------------------------------------------------------------------------


def apply(cluster: LocalCluster, *objects: dict[str, Any]) -> None:
    cluster.apply(list(objects))


def delete(cluster: LocalCluster, obj: dict[str, Any]) -> None:
    resource = f"{obj['kind'].lower()}.{obj['apiVersion'].split('/')[0]}"
    where = ["-n", obj["metadata"]["namespace"]] if obj["metadata"].get("namespace") else []
    cluster.kubectl("delete", resource, obj["metadata"]["name"], *where, "--ignore-not-found")


def install_policy_crds(cluster: LocalCluster) -> None:
    """The example policy CRDs (examples/cluster/00-policy-crds.yaml, adapted for v1.20)."""
    from cluster import adapt_crd_for_v1_20

    path = EXAMPLES / "cluster" / "00-policy-crds.yaml"
    crds = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    cluster.apply([adapt_crd_for_v1_20(doc) for doc in crds])
    names = [f"crd/{crd['metadata']['name']}" for crd in crds]
    cluster.kubectl("wait", "--for=condition=Established", *names, "--timeout=30s")


def policy(kind: str, ns: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    metadata = {"name": name, "namespace": ns} if ns else {"name": name}
    return {
        "apiVersion": f"{POLICY_GROUP}/v1alpha1",
        "kind": kind,
        "metadata": metadata,
        "spec": spec,
    }


def admission_review(
    obj: dict[str, Any],
    resource: str,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An AdmissionReview v1 of `obj` as kube-apiserver sends it (`resource`: the plural)."""
    group, _, version = obj["apiVersion"].rpartition("/")
    metadata = obj["metadata"]
    gvk = {"group": group, "version": version, "kind": obj["kind"]}
    gvr = {"group": group, "version": version, "resource": resource}
    options_kind = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions"}.get(operation)
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": metadata["name"], "operation": operation,
        "userInfo": {"username": "admin", "groups": ["system:masters", "system:authenticated"]},
        "object": None if operation == "DELETE" else obj,
        "oldObject": (old or obj) if operation == "DELETE" else old,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": options_kind or "DeleteOptions"},
    }  # fmt: skip
    if metadata.get("namespace"):
        request["namespace"] = metadata["namespace"]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


class World:
    """A world of one's own under `prefix`, so that it shares nothing with other modules':
    GatewayClass `<prefix>`, Gateway `<prefix>-infra/gw` (listeners `http` and `web`, both
    from All), and in `<prefix>-apps` the Services `svc-<i>` and HTTPRoutes `route-<i>` (route i
    on the Gateway, backend svc-i). Policies here touch only these objects.
    """

    def __init__(self, prefix: str, routes: int) -> None:
        self.prefix, self.routes = prefix, routes
        self.infra, self.apps = f"{prefix}-infra", f"{prefix}-apps"
        self.watched = in_namespaces(
            {self.infra, self.apps}, ObjectKey(GW, "GatewayClass", "", prefix)
        )

    def objects(self, indices: Iterable[int] | None = None) -> list[dict[str, Any]]:
        """Namespaces, class and Gateway, then routes and Services (all, or those of `indices`)."""
        numbers = range(self.routes) if indices is None else indices
        listeners = [
            {"name": name, "protocol": "HTTP", "port": port,
             "allowedRoutes": {"namespaces": {"from": "All"}}}
            for name, port in (("http", 80), ("web", 8080))
        ]  # fmt: skip
        head: list[dict[str, Any]] = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.infra}},
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.apps}},
            {"apiVersion": f"{GW}/v1", "kind": "GatewayClass", "metadata": {"name": self.prefix},
             "spec": {"controllerName": f"example.net/{self.prefix}"}},
            {"apiVersion": f"{GW}/v1", "kind": "Gateway",
             "metadata": {"name": "gw", "namespace": self.infra},
             "spec": {"gatewayClassName": self.prefix, "listeners": listeners}},
        ]  # fmt: skip
        return head + [obj for i in numbers for obj in (self.service(i), self.route(i))]

    def service(self, i: int) -> dict[str, Any]:
        return {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"svc-{i}", "namespace": self.apps},
            "spec": {"selector": {"app": f"svc-{i}"},
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]},
        }  # fmt: skip

    def route(self, i: int, section: str | None = None) -> dict[str, Any]:
        parent = {"name": "gw", "namespace": self.infra}
        if section:
            parent["sectionName"] = section
        return {
            "apiVersion": f"{GW}/v1", "kind": "HTTPRoute",
            "metadata": {"name": f"route-{i}", "namespace": self.apps},
            "spec": {"parentRefs": [parent],
                     "rules": [{"name": "main", "backendRefs": [{"name": f"svc-{i}", "port": 80}]}]},
        }  # fmt: skip

    # Policies: each touches a different part of the ladder (SPEC §4.1).

    def gateway_color(self, color: str) -> dict[str, Any]:
        """Inherited, an override on the Gateway: fans out to every route and Service."""
        target = {"group": GW, "kind": "Gateway", "name": "gw"}
        spec = {"targetRefs": [target], "override": {"color": color}}
        return policy("ColorPolicy", self.infra, "gw-color", spec)

    def namespace_timeout(self, timeout: str) -> dict[str, Any]:
        """Inherited, a default on the routes' Namespace."""
        target = {"group": "", "kind": "Namespace", "name": self.apps}
        spec = {"targetRefs": [target], "default": {"timeout": timeout}}
        return policy("TimeoutPolicy", self.apps, "ns-timeout", spec)

    def route_retry(self, i: int, retries: int) -> dict[str, Any]:
        """Inherited, a default on one route (reaches its Service too)."""
        target = {"group": GW, "kind": "HTTPRoute", "name": f"route-{i}"}
        spec = {"targetRefs": [target], "default": {"maxRetries": retries}}
        return policy("RetryPolicy", self.apps, f"route-{i}-retry", spec)

    def service_health(self, i: int, path: str) -> dict[str, Any]:
        """Direct, on one Service: its annotation is this policy or nothing."""
        target = {"group": "", "kind": "Service", "name": f"svc-{i}"}
        spec = {"targetRefs": [target], "path": path}
        return policy("HealthCheckPolicy", self.apps, f"svc-{i}-health", spec)

    def class_limits(self, connections: int) -> dict[str, Any]:
        """Cluster-scoped, an override on the GatewayClass: reaches everything of the class."""
        target = {"group": GW, "kind": "GatewayClass", "name": self.prefix}
        spec = {"targetRefs": [target], "override": {"maxConnections": connections}}
        return policy("ConnectionLimitPolicy", "", f"{self.prefix}-limits", spec)

    def remove(self, cluster: LocalCluster) -> None:
        """Delete every object of this world but its Namespaces (no namespace controller runs
        here to finalize them), so that no annotation of ours is left to go stale."""
        policy_kinds = ",".join(
            f"{plural}.{POLICY_GROUP}"
            for plural in (
                "colorpolicies",
                "timeoutpolicies",
                "retrypolicies",
                "healthcheckpolicies",
            )
        )
        for ns in (self.apps, self.infra):
            cluster.kubectl(
                "delete", f"{policy_kinds},httproutes.{GW},gateways.{GW},services", "--all",
                "-n", ns, "--ignore-not-found", "--wait=false", timeout=120,
            )  # fmt: skip
        cluster.kubectl(
            "delete", f"connectionlimitpolicy.{POLICY_GROUP}", f"{self.prefix}-limits",
            "--ignore-not-found",
        )  # fmt: skip
        cluster.kubectl("delete", f"gatewayclass.{GW}", self.prefix, "--ignore-not-found")
