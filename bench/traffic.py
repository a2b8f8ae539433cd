"""Real-shaped AdmissionReview bodies for a generated cluster: what the API server would send.

`/validate` gets policy CREATEs and UPDATEs, a mix of valid ones (on routes, rules, Services,
Namespaces, Gateways) and broken ones (one per kind of mistake of SPEC §2.1/§2.2); `/mutate`
gets route, Service and Gateway writes whose targets sit in several contexts (two parents, no
sectionName: every admitting listener of each). Weights are in `VALIDATE_MIX`/`MUTATE_MIX`.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from typing import Any

from bench.synth import GW, POLICY_VERSION, Cluster

Review = dict[str, Any]
Maker = Callable[[random.Random, Cluster, int], tuple[str, dict[str, Any], dict[str, Any] | None]]

# category → weight. Valid policies 60 %, broken ones 40 % (one rule each, several rules in a few).
VALIDATE_MIX: dict[str, float] = {
    "valid-route": 0.26,
    "valid-rule": 0.06,
    "valid-service-direct": 0.12,
    "valid-namespace": 0.02,
    "valid-gateway": 0.04,
    "update-route": 0.10,
    "broken-shape": 0.24,
    "broken-target": 0.16,
}
# Policies whose impact preview reaches every object below a Gateway or in a Namespace (up to
# `Settings.max_impact_objects`); the "light" figures leave them out.
HEAVY = frozenset({"valid-gateway", "valid-namespace"})
MUTATE_MIX: dict[str, float] = {
    "create-route-two-parents": 0.5,
    "update-route": 0.25,
    "update-service": 0.2,
    "update-gateway": 0.05,
}


def validate_reviews(cluster: Cluster, n: int, *, seed: int = 7) -> list[tuple[str, Review]]:
    """`n` (category, review) pairs for `/validate`, in a shuffled but fixed order."""
    return _mix(cluster, n, seed, VALIDATE_MIX, _VALIDATE)


def mutate_reviews(cluster: Cluster, n: int, *, seed: int = 11) -> list[tuple[str, Review]]:
    return _mix(cluster, n, seed, MUTATE_MIX, _MUTATE)


def as_json_lines(reviews: list[tuple[str, Review]]) -> str:
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for _, r in reviews)


def _mix(
    cluster: Cluster,
    n: int,
    seed: int,
    weights: dict[str, float],
    makers: dict[str, Callable[..., Any]],
) -> list[tuple[str, Review]]:
    rng = random.Random(seed)
    out = []
    for category, weight in weights.items():
        for i in range(max(1, round(weight * n))):
            op, obj, old = makers[category](rng, cluster, i)
            out.append((category, review(obj, op, old=old, uid=f"{category}-{i}")))
    rng.shuffle(out)
    return out[:n] if len(out) > n else out


def review(
    obj: dict[str, Any], operation: str, *, old: dict[str, Any] | None = None, uid: str
) -> Review:
    group, _, version = obj["apiVersion"].rpartition("/")
    kind = obj["kind"]
    meta = obj["metadata"]
    request: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "name": meta["name"],
        "operation": operation,
        "userInfo": {"username": "system:serviceaccount:ci:deployer", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": old,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.title()}Options"},
    }  # fmt: skip
    if "namespace" in meta:
        request["namespace"] = meta["namespace"]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


# --- /validate --------------------------------------------------------------------------------


def _policy(kind: str, name: str, ns: str | None, spec: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "creationTimestamp": "2025-06-01T12:00:00Z",
        "generation": 1,
    }
    if ns:
        meta["namespace"] = ns
    return {"apiVersion": POLICY_VERSION, "kind": kind, "metadata": meta, "spec": spec}


def _route_ref(route: dict[str, Any], section: str | None = None) -> dict[str, Any]:
    ref = {"group": GW, "kind": "HTTPRoute", "name": route["metadata"]["name"]}
    if section:
        ref["sectionName"] = section
    return ref


def _retry(rng: random.Random) -> dict[str, Any]:
    return {"default": {"maxRetries": rng.randint(1, 5), "retryOn": ["503"]}}


def _valid_route(rng: random.Random, c: Cluster, i: int) -> tuple[str, dict[str, Any], None]:
    route = rng.choice(c.routes)
    ns = route["metadata"]["namespace"]
    spec = {"targetRefs": [_route_ref(route)], **_retry(rng)}
    return "CREATE", _policy("RetryPolicy", f"bench-route-{i}", ns, spec), None


def _valid_rule(rng: random.Random, c: Cluster, i: int) -> tuple[str, dict[str, Any], None]:
    route = rng.choice([r for r in c.routes[:500] if any("name" in x for x in r["spec"]["rules"])])
    section = next(x["name"] for x in route["spec"]["rules"] if "name" in x)
    spec = {
        "targetRefs": [_route_ref(route, section)],
        "default": {"timeout": "15s", "requestHeaders": {"x-bench": "1"}},
    }
    return (
        "CREATE",
        _policy("TimeoutPolicy", f"bench-rule-{i}", route["metadata"]["namespace"], spec),
        None,
    )


def _valid_service(rng: random.Random, c: Cluster, i: int) -> tuple[str, dict[str, Any], None]:
    svc = rng.choice(c.services)
    ref = {"group": "", "kind": "Service", "name": svc["metadata"]["name"]}
    if rng.random() < 0.3:
        ref["sectionName"] = "https"
    spec = {"targetRefs": [ref], "path": "/healthz", "intervalSeconds": 10}
    return (
        "CREATE",
        _policy("HealthCheckPolicy", f"bench-hc-{i}", svc["metadata"]["namespace"], spec),
        None,
    )


def _valid_namespace(rng: random.Random, c: Cluster, i: int) -> tuple[str, dict[str, Any], None]:
    ns = rng.choice(c.app_namespaces)
    spec = {
        "targetRefs": [{"group": "", "kind": "Namespace", "name": ns}],
        "default": {"timeout": "45s"},
    }
    return "CREATE", _policy("TimeoutPolicy", f"bench-ns-{i}", ns, spec), None


def _valid_gateway(rng: random.Random, c: Cluster, i: int) -> tuple[str, dict[str, Any], None]:
    gw = rng.choice(c.gateways[1:])  # an ordinary Gateway; the busy one is the fan-out benchmark's
    spec = {
        "targetRefs": [{"group": GW, "kind": "Gateway", "name": gw["metadata"]["name"]}],
        "overrides": {"cdn": {"enabled": True}},
        "defaults": {"color": "purple"},
    }
    return (
        "CREATE",
        _policy("ColorPolicy", f"bench-gw-{i}", gw["metadata"]["namespace"], spec),
        None,
    )


def _update_route(
    rng: random.Random, c: Cluster, i: int
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    candidates = [
        p for p in c.policies if p["kind"] == "RetryPolicy" and p["spec"]["targetRefs"][0]["kind"] == "HTTPRoute"
    ]  # fmt: skip
    old = rng.choice(candidates)
    new = copy.deepcopy(old)
    new["spec"]["default"]["retryOn"] = ["502", "504"]
    new["metadata"]["generation"] = 2
    return "UPDATE", new, old


_BROKEN_SHAPES: tuple[Callable[[dict[str, Any]], dict[str, Any]], ...] = (
    lambda ref: {"targetRef": ref, "targetRefs": [ref], "default": {"maxRetries": 1}},  # S01
    lambda ref: {"targetRefs": [], "default": {"maxRetries": 1}},  # S02
    lambda ref: {"targetRefs": [{**ref, "group": f"{GW}/v1"}], "default": {"maxRetries": 1}},  # S04
    lambda ref: {"targetRefs": [ref, dict(ref)], "default": {"maxRetries": 1}},  # S05
    lambda ref: {"targetRefs": [ref], "default": {"maxRetries": 1}, "defaults": {"retryOn": ["5xx"]}},  # S07
    lambda ref: {"targetRefs": [ref], "override": "3"},  # S08
    lambda ref: {"targetRefs": [ref], "maxRetries": 3, "default": {"retryOn": ["503"]}},  # S09
    lambda ref: {"targetRefs": [ref], "default": {}},  # S10
    lambda ref: {"targetRefs": [ref], "default": {"maxRetries": 2}, "override": {"maxRetries": 3}},  # S11
)  # fmt: skip


def _broken_shape(rng: random.Random, c: Cluster, i: int) -> tuple[str, dict[str, Any], None]:
    route = rng.choice(c.routes)
    spec = _BROKEN_SHAPES[i % len(_BROKEN_SHAPES)](_route_ref(route))
    if i % 10 == 9:  # a Direct policy with a wrapper (PA-S06)
        spec = {
            "targetRefs": [{"group": "", "kind": "Service", "name": "svc-00000"}],
            "default": {"path": "/"},
        }
        return "CREATE", _policy("HealthCheckPolicy", f"broken-{i}", "app-000", spec), None
    return (
        "CREATE",
        _policy("RetryPolicy", f"broken-{i}", route["metadata"]["namespace"], spec),
        None,
    )


def _broken_target(rng: random.Random, c: Cluster, i: int) -> tuple[str, dict[str, Any], None]:
    route = rng.choice(c.routes)
    ns = route["metadata"]["namespace"]
    other = next(n for n in c.app_namespaces if n != ns)
    refs = (
        [{"group": "", "kind": "ConfigMap", "name": "settings"}],  # T01
        [{**_route_ref(route), "namespace": ns}, {"group": "", "kind": "Service", "name": "svc-00001"}],  # T02 (Direct)
        [{**_route_ref(route), "namespace": ns}],  # T03: from another namespace, no grant for ColorPolicy
        [{"group": "", "kind": "Namespace", "name": other}],  # T04
        [{"group": "", "kind": "Namespace", "name": ns, "sectionName": "x"}],  # T05
        [{"group": GW, "kind": "httproute", "name": route["metadata"]["name"]}],  # T09 (+ T01)
    )[i % 6]  # fmt: skip
    kind, policy_ns = "ColorPolicy", ns
    if i % 6 == 1:
        kind = "HealthCheckPolicy"
    if i % 6 == 2:
        policy_ns = other
    spec: dict[str, Any] = {"targetRefs": refs}
    spec.update({"path": "/"} if kind == "HealthCheckPolicy" else {"defaults": {"color": "red"}})
    return "CREATE", _policy(kind, f"broken-target-{i}", policy_ns, spec), None


_VALIDATE: dict[str, Callable[..., Any]] = {
    "valid-route": _valid_route,
    "valid-rule": _valid_rule,
    "valid-service-direct": _valid_service,
    "valid-namespace": _valid_namespace,
    "valid-gateway": _valid_gateway,
    "update-route": _update_route,
    "broken-shape": _broken_shape,
    "broken-target": _broken_target,
}


# --- /mutate ----------------------------------------------------------------------------------


def _create_route(rng: random.Random, c: Cluster, i: int) -> tuple[str, dict[str, Any], None]:
    template = rng.choice(c.routes)
    obj = copy.deepcopy(template)
    obj["metadata"] = {
        "name": f"bench-new-route-{i}",
        "namespace": template["metadata"]["namespace"],
    }
    g1, g2 = rng.sample(c.gateways, 2)
    obj["spec"]["parentRefs"] = [
        {"group": GW, "kind": "Gateway", "namespace": g["metadata"]["namespace"], "name": g["metadata"]["name"]}
        for g in (g1, g2)
    ]  # fmt: skip
    return "CREATE", obj, None


def _update(pool: Callable[[Cluster], list[dict[str, Any]]]) -> Callable[..., Any]:
    def make(rng: random.Random, c: Cluster, i: int) -> tuple[str, dict[str, Any], dict[str, Any]]:
        old = rng.choice(pool(c))
        new = copy.deepcopy(old)
        new["metadata"].setdefault("labels", {})["bench"] = str(i)
        return "UPDATE", new, old

    return make


_MUTATE: dict[str, Callable[..., Any]] = {
    "create-route-two-parents": _create_route,
    "update-route": _update(lambda c: c.routes),
    "update-service": _update(lambda c: c.services),
    "update-gateway": _update(lambda c: c.gateways[1:]),
}
