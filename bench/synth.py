"""A seeded, configurable synthetic cluster: Gateways, routes, Services, Namespaces, policies.

Same seed and shape, same objects, in the same order. The default shape is the issue's: 100
Gateways x 3 listeners, 10,000 HTTPRoutes, 5,000 Services, 40 Namespaces and 2,000 policies of
5 kinds spread over every level of the hierarchy. `Shape.scaled(k)` multiplies every count, so
per-namespace density and per-Gateway fan-in stay the same shape as the cluster grows — except
the busy Gateway, which keeps its share of all routes (`busy_share`) and so grows with `k`.

Only plain JSON-ready dicts are produced, as the API server would send them; nothing here
knows about the webhook's store.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

GW = "gateway.networking.k8s.io"
POLICY_GROUP = "policies.example.com"
POLICY_VERSION = f"{POLICY_GROUP}/v1alpha1"
CRD_FILE = Path(__file__).resolve().parent.parent / "examples" / "cluster" / "00-policy-crds.yaml"
# The five kinds: four Inherited (one cluster-scoped), one Direct. LegacyRatePolicy is left out.
KINDS = (
    "RetryPolicy",
    "TimeoutPolicy",
    "ColorPolicy",
    "HealthCheckPolicy",
    "ConnectionLimitPolicy",
)
EPOCH = 1_704_067_200  # 2024-01-01T00:00:00Z

# Where policies attach, as a share of all policies. Every level of SPEC §4.1 has some.
LEVELS: tuple[tuple[str, float], ...] = (
    ("class", 0.002),
    ("gateway", 0.03),
    ("listener", 0.02),
    ("namespace", 0.02),
    ("route", 0.40),
    ("rule", 0.09),
    ("service", 0.33),
    ("port", 0.088),
)


@dataclass(frozen=True, slots=True)
class Shape:
    gateways: int = 100
    listeners: int = 3  # per Gateway: http (All), https (Selector), tls (Same), then more http
    routes: int = 10_000
    services: int = 5_000
    namespaces: int = 40
    policies: int = 2_000
    gateway_classes: int = 2
    busy_share: float = 0.10  # share of routes whose first parent is the busy Gateway
    second_parent: float = 0.20  # routes with a second parentRef (more contexts)

    def scaled(self, k: float) -> Shape:
        def n(value: int, floor: int = 1) -> int:
            return max(floor, round(value * k))

        return replace(
            self,
            gateways=n(self.gateways, 2),
            routes=n(self.routes),
            services=n(self.services),
            namespaces=n(self.namespaces, 4),
            policies=n(self.policies, 20),
            gateway_classes=n(self.gateway_classes),
        )


@dataclass(slots=True)
class Cluster:
    """Every object of one generated cluster, by kind, plus what the traffic mixes need."""

    shape: Shape
    seed: int
    crds: list[dict[str, Any]] = field(default_factory=list)
    namespaces: list[dict[str, Any]] = field(default_factory=list)
    classes: list[dict[str, Any]] = field(default_factory=list)
    gateways: list[dict[str, Any]] = field(default_factory=list)
    services: list[dict[str, Any]] = field(default_factory=list)
    routes: list[dict[str, Any]] = field(default_factory=list)
    grants: list[dict[str, Any]] = field(default_factory=list)
    policies: list[dict[str, Any]] = field(default_factory=list)
    infra_namespaces: list[str] = field(default_factory=list)
    app_namespaces: list[str] = field(default_factory=list)
    busy_policy: dict[str, Any] | None = None  # a RetryPolicy on the busy Gateway

    def objects(self) -> Iterator[dict[str, Any]]:
        """Everything, CRDs first (as an operator would apply them)."""
        for group in (
            self.crds,
            self.namespaces,
            self.classes,
            self.gateways,
            self.services,
            self.routes,
            self.grants,
            self.policies,
        ):
            yield from group

    def annotated(self) -> Iterator[dict[str, Any]]:
        """Objects the mutating webhook annotates (SPEC §3.1)."""
        yield from self.classes
        yield from self.gateways
        yield from self.routes
        yield from self.services

    @property
    def busy_gateway(self) -> dict[str, Any]:
        return self.gateways[0]

    def count(self) -> int:
        return sum(1 for _ in self.objects())


def policy_crds() -> list[dict[str, Any]]:
    with open(CRD_FILE, encoding="utf-8") as handle:
        docs = list(yaml.load_all(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
    return [d for d in docs if d and d["spec"]["names"]["kind"] in KINDS]


def generate(shape: Shape = Shape(), *, seed: int = 1) -> Cluster:
    rng = random.Random(seed)
    c = Cluster(shape=shape, seed=seed, crds=policy_crds())
    n_infra = max(1, shape.namespaces // 10)
    c.infra_namespaces = [f"infra-{i:02d}" for i in range(n_infra)]
    c.app_namespaces = [f"app-{i:03d}" for i in range(shape.namespaces - n_infra)]
    for i, ns in enumerate(c.infra_namespaces + c.app_namespaces):
        labels = {"team": f"t{i % 7}"}
        if ns.startswith("infra") or i % 2 == 0:
            labels["gateway-access"] = "true"
        c.namespaces.append(_meta("v1", "Namespace", ns, None, labels=labels))
    for i in range(shape.gateway_classes):
        obj = _meta(f"{GW}/v1", "GatewayClass", f"class-{i}", None)
        obj["spec"] = {"controllerName": "example.net/gateway-controller"}
        c.classes.append(obj)
    for i in range(shape.gateways):
        ns = c.infra_namespaces[i % n_infra]
        obj = _meta(f"{GW}/v1", "Gateway", f"gw-{i:04d}", ns)
        obj["spec"] = {
            "gatewayClassName": f"class-{i % shape.gateway_classes}",
            "listeners": _listeners(shape.listeners),
        }
        c.gateways.append(obj)
    by_ns: dict[str, list[dict[str, Any]]] = {ns: [] for ns in c.app_namespaces}
    for i in range(shape.services):
        ns = c.app_namespaces[i % len(c.app_namespaces)]
        obj = _meta("v1", "Service", f"svc-{i:05d}", ns)
        obj["spec"] = {
            "selector": {"app": f"svc-{i:05d}"},
            "ports": [
                {"name": "http", "port": 80, "targetPort": 8080},
                {"name": "https", "port": 443, "targetPort": 8443},
                {"port": 9090},  # unnamed: not a section
            ],
        }
        c.services.append(obj)
        by_ns[ns].append(obj)
    for i in range(shape.routes):
        ns = c.app_namespaces[(i * 7 + i // len(c.app_namespaces)) % len(c.app_namespaces)]
        c.routes.append(_route(rng, i, ns, c, by_ns[ns]))
    for ns in c.app_namespaces:
        c.grants.append(_grant(ns, c.infra_namespaces))
    _policies(rng, c)
    return c


def _meta(
    api_version: str,
    kind: str,
    name: str,
    namespace: str | None,
    *,
    labels: dict[str, str] | None = None,
    created: int | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "uid": f"uid-{kind.lower()}-{namespace}-{name}"}
    if namespace:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = labels
    if created is not None:
        metadata["creationTimestamp"] = _stamp(created)
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata}


def _stamp(seconds: int) -> str:
    import datetime

    moment = datetime.datetime.fromtimestamp(EPOCH + seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _listeners(count: int) -> list[dict[str, Any]]:
    base = [
        {"name": "http", "protocol": "HTTP", "port": 80, "allowedRoutes": {"namespaces": {"from": "All"}}},
        {
            "name": "https",
            "protocol": "HTTPS",
            "port": 443,
            "hostname": "*.example.com",
            "tls": {"mode": "Terminate", "certificateRefs": [{"kind": "Secret", "name": "wildcard"}]},
            "allowedRoutes": {
                "namespaces": {"from": "Selector", "selector": {"matchLabels": {"gateway-access": "true"}}}
            },
        },
        {"name": "tls", "protocol": "TLS", "port": 8443, "tls": {"mode": "Passthrough"},
         "allowedRoutes": {"namespaces": {"from": "Same"}}},
    ]  # fmt: skip
    extra = [
        {"name": f"http-{i}", "protocol": "HTTP", "port": 8000 + i,
         "allowedRoutes": {"namespaces": {"from": "All"}}}
        for i in range(max(0, count - len(base)))
    ]  # fmt: skip
    return (base + extra)[:count]


def _route(
    rng: random.Random, i: int, ns: str, c: Cluster, services: list[dict[str, Any]]
) -> dict[str, Any]:
    gateways = c.gateways
    first = 0 if rng.random() < c.shape.busy_share else rng.randrange(1, len(gateways))
    parents = [first]
    if rng.random() < c.shape.second_parent:
        parents.append(rng.randrange(len(gateways)))
    refs = []
    for g in dict.fromkeys(parents):
        ref = {
            "group": GW,
            "kind": "Gateway",
            "namespace": _ns(gateways[g]),
            "name": _name(gateways[g]),
        }
        if rng.random() < 0.15:
            ref["sectionName"] = rng.choice(("http", "https"))
        refs.append(ref)
    rules = []
    for r in range(rng.choice((1, 1, 2, 2, 3))):
        rule: dict[str, Any] = {
            "matches": [{"path": {"type": "PathPrefix", "value": f"/r{i}/p{r}"}}],
            "backendRefs": [
                {"name": _name(svc), "port": rng.choice((80, 80, 443)), "weight": 1}
                for svc in rng.sample(services, k=min(len(services), rng.choice((1, 1, 2))))
            ],
        }
        if rng.random() < 0.5:
            rule = {"name": ("api", "web", "admin")[r], **rule}
        rules.append(rule)
    obj = _meta(f"{GW}/v1", "HTTPRoute", f"route-{i:06d}", ns)
    obj["spec"] = {"parentRefs": refs, "hostnames": [f"r{i}.example.com"], "rules": rules}
    return obj


def _grant(ns: str, from_namespaces: list[str]) -> dict[str, Any]:
    obj = _meta(f"{GW}/v1beta1", "ReferenceGrant", "policies-from-infra", ns)
    obj["spec"] = {
        "from": [
            {"group": POLICY_GROUP, "kind": kind, "namespace": infra}
            for infra in from_namespaces
            for kind in ("RetryPolicy", "TimeoutPolicy")
        ],
        "to": [{"group": GW, "kind": "HTTPRoute"}],
    }
    return obj


# --- policies --------------------------------------------------------------------------------


def _policies(rng: random.Random, c: Cluster) -> None:
    total = c.shape.policies
    counts = {level: int(share * total) for level, share in LEVELS}
    counts["class"] = max(1, counts["class"])
    counts["gateway"] = max(1, counts["gateway"])
    counts["route"] += total - sum(counts.values())
    # The fan-out benchmark edits this one: an Inherited policy on the busy Gateway.
    busy = _meta(
        POLICY_VERSION, "RetryPolicy", "busy-gateway-retry", _ns(c.busy_gateway), created=0
    )
    busy["spec"] = {"targetRefs": [_gateway_ref(c.busy_gateway)], **_settings(rng, "RetryPolicy")}
    c.busy_policy = busy
    c.policies.append(busy)
    counts["gateway"] -= 1
    made: list[dict[str, Any]] = [busy]  # for policies that share a target (conflicts)
    serial = 0
    for level, count in counts.items():
        for _ in range(count):
            kind, namespace, refs = _target(rng, c, level, made)
            name = f"{kind.lower()}-{serial:06d}"
            created = rng.randrange(0, 365 * 86_400) if rng.random() > 0.02 else 0  # some ties
            obj = _meta(POLICY_VERSION, kind, name, namespace, created=created)
            obj["spec"] = {"targetRefs": refs, **_settings(rng, kind)}
            c.policies.append(obj)
            made.append(obj)
            serial += 1


def _gateway_ref(gw: dict[str, Any], section: str | None = None) -> dict[str, Any]:
    ref = {"group": GW, "kind": "Gateway", "name": _name(gw)}
    if section:
        ref["sectionName"] = section
    return ref


def _target(
    rng: random.Random, c: Cluster, level: str, made: list[dict[str, Any]]
) -> tuple[str, str | None, list[dict[str, Any]]]:
    """(kind, policy namespace, targetRefs) for one policy at one level."""
    inherited = ("RetryPolicy", "TimeoutPolicy", "ColorPolicy")
    if level == "class":
        cls = rng.choice(c.classes)
        return (
            "ConnectionLimitPolicy",
            None,
            [{"group": GW, "kind": "GatewayClass", "name": _name(cls)}],
        )
    if level in ("gateway", "listener"):
        gw = rng.choice(c.gateways)
        section = rng.choice(("http", "https")) if level == "listener" else None
        if level == "gateway" and rng.random() < 0.2:
            ref = {**_gateway_ref(gw), "namespace": _ns(gw)}
            return "ConnectionLimitPolicy", None, [ref]
        return rng.choice(inherited), _ns(gw), [_gateway_ref(gw, section)]
    if level == "namespace":
        ns = rng.choice(c.app_namespaces)
        return rng.choice(inherited), ns, [{"group": "", "kind": "Namespace", "name": ns}]
    if level in ("route", "rule"):
        kind = rng.choice(inherited if level == "route" else inherited[:2])
        if made and rng.random() < 0.05:  # another policy of this kind on a target taken before
            for other in reversed(made[-50:]):
                if other["kind"] == kind and other["spec"]["targetRefs"][0]["kind"] == "HTTPRoute":
                    return (
                        kind,
                        other["metadata"]["namespace"],
                        [dict(other["spec"]["targetRefs"][0])],
                    )
        routes = [rng.choice(c.routes) for _ in range(rng.choice((1, 1, 1, 1, 2, 3)))]
        refs = []
        for route in routes:
            ref = {"group": GW, "kind": "HTTPRoute", "name": _name(route)}
            if level == "rule":
                named = [r["name"] for r in route["spec"]["rules"] if "name" in r]
                if named:
                    ref["sectionName"] = rng.choice(named)
            refs.append((route, ref))
        ns = _ns(routes[0])
        if kind != "ColorPolicy" and level == "route" and rng.random() < 0.05:
            ns = rng.choice(c.infra_namespaces)  # cross-namespace, granted by ReferenceGrant
        out = []
        for route, ref in refs:
            if _ns(route) != ns:
                ref["namespace"] = _ns(route)
            out.append(ref)
        return kind, ns, _dedupe(out)
    svc = rng.choice(c.services)
    ref = {"group": "", "kind": "Service", "name": _name(svc)}
    if level == "port":
        ref["sectionName"] = rng.choice(("http", "https"))
    kind = "HealthCheckPolicy" if rng.random() < 0.7 else rng.choice(inherited[:2])
    return kind, _ns(svc), [ref]


def _dedupe(refs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for ref in refs:
        seen.setdefault((ref.get("namespace"), ref["name"]), ref)
    return list(seen.values())


def _settings(rng: random.Random, kind: str) -> dict[str, Any]:
    """The spec proper, or its `default`/`override` wrappers, of one policy of `kind`."""
    if kind == "HealthCheckPolicy":
        return {
            "path": rng.choice(("/healthz", "/ready", "/livez")),
            "intervalSeconds": rng.choice((5, 10, 30)),
            "healthyThreshold": rng.choice((1, 2, 3)),
        }
    if kind == "RetryPolicy":
        default: dict[str, Any] = {
            "retryOn": rng.sample(["502", "503", "504", "reset"], k=rng.randint(1, 3)),
            "backoff": {"baseInterval": rng.choice(("25ms", "100ms"))},
        }
        if rng.random() < 0.3:
            default["perStatus"] = [{"code": 503, "maxRetries": rng.randint(0, 5)}]
        out: dict[str, Any] = {"default": default}
        if rng.random() < 0.3:
            out["override"] = {"maxRetries": rng.randint(1, 5)}
        else:
            default["maxRetries"] = rng.randint(1, 5)
        return out
    if kind == "TimeoutPolicy":
        out = {
            "default": {
                "timeout": f"{rng.choice((5, 10, 30))}s",
                "connectionTimeout": rng.randint(1, 9),
            }
        }
        if rng.random() < 0.2:
            out["default"]["requestHeaders"] = {"x-timeout-class": rng.choice(("fast", "slow"))}
        if rng.random() < 0.25:
            out["override"] = {"drainTimeout": rng.choice((30, 60, 120))}
        return out
    if kind == "ColorPolicy":
        out = {"defaults": {"color": rng.choice(("red", "blue", "green"))}}
        if rng.random() < 0.3:
            out["defaults"]["cdn"] = {"cachePolicy": {"includeHost": rng.random() < 0.5}}
        if rng.random() < 0.2:
            out["overrides"] = {"cdn": {"enabled": True}}
        return out
    assert kind == "ConnectionLimitPolicy"
    out = {"default": {"maxConnections": rng.choice((1000, 5000, 10000))}}
    if rng.random() < 0.5:
        out["override"] = {"maxRequestsPerConnection": rng.choice((100, 1000))}
    return out


def _name(obj: dict[str, Any]) -> str:
    name: str = obj["metadata"]["name"]
    return name


def _ns(obj: dict[str, Any]) -> str:
    ns: str = obj["metadata"].get("namespace", "")
    return ns


def describe(c: Cluster) -> dict[str, int]:
    """Counts of what was generated, for the report."""
    return {
        "namespaces": len(c.namespaces),
        "gateway_classes": len(c.classes),
        "gateways": len(c.gateways),
        "listeners": sum(len(g["spec"]["listeners"]) for g in c.gateways),
        "routes": len(c.routes),
        "services": len(c.services),
        "reference_grants": len(c.grants),
        "policies": len(c.policies),
        "busy_gateway_routes": sum(
            1 for r in c.routes if r["spec"]["parentRefs"][0]["name"] == _name(c.busy_gateway)
        ),
    }
