"""The objects of the end-to-end benchmark: one Gateway with a RetryPolicy, one backend Service,
and N HTTPRoutes on that Gateway all sending to that Service.

That shape is the worst case the issue names: every route is a context of the Service, so the
Service's annotation value grows with N, and a policy on the Gateway reaches every route. The
policy's `maxRetries` is the marker of a fan-out: a route's annotation is right once every
context of its RetryPolicy entry says the marker.
"""

from __future__ import annotations

import base64
import copy
import importlib
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
# The end-to-end suite's control plane (LocalCluster, provision): imported from its folder.
cluster_lib: Any = importlib.import_module("cluster")

GW = "gateway.networking.k8s.io"
POLICY_GROUP = "policies.example.com"
INFRA = "bench-infra"
APPS = "bench-apps"
GATEWAY = "gw"
SERVICE = "backend"
POLICY = "gw-retry"
RETRY_KIND_PREFIX = f"RetryPolicy.{POLICY_GROUP}"
ANNOTATION = "policy-attachment.dev/effective-policies"
ROUTES_PATH = f"/apis/{GW}/v1/namespaces/{APPS}/httproutes"
WEBHOOKS = ROOT / "manifests" / "base" / "webhooks.yaml"


def policy_crds() -> list[dict[str, Any]]:
    """The example policy CRDs, as the end-to-end suite installs them on v1.20."""
    path = ROOT / "examples" / "cluster" / "00-policy-crds.yaml"
    docs = [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]
    return [cluster_lib.adapt_crd_for_v1_20(doc) for doc in docs]


def retry_policy(marker: int) -> dict[str, Any]:
    """The Gateway's RetryPolicy; `marker` is its `maxRetries`, unique per fan-out."""
    return {
        "apiVersion": f"{POLICY_GROUP}/v1alpha1",
        "kind": "RetryPolicy",
        "metadata": {"name": POLICY, "namespace": INFRA},
        "spec": {
            "targetRefs": [{"group": GW, "kind": "Gateway", "name": GATEWAY}],
            "default": {"maxRetries": marker, "retryOn": ["503"]},
        },
    }


def base_objects(marker: int) -> list[dict[str, Any]]:
    """Namespaces, GatewayClass, Gateway (routes from every Namespace), Service, policy."""
    listener = {
        "name": "http",
        "protocol": "HTTP",
        "port": 80,
        "allowedRoutes": {"namespaces": {"from": "All"}},
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": INFRA}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": APPS}},
        {"apiVersion": f"{GW}/v1", "kind": "GatewayClass", "metadata": {"name": "bench"},
         "spec": {"controllerName": "example.net/bench"}},
        {"apiVersion": f"{GW}/v1", "kind": "Gateway",
         "metadata": {"name": GATEWAY, "namespace": INFRA},
         "spec": {"gatewayClassName": "bench", "listeners": [listener]}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE, "namespace": APPS},
         "spec": {"selector": {"app": SERVICE},
                  "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}},
        retry_policy(marker),
    ]  # fmt: skip


def route(name: str) -> dict[str, Any]:
    """One HTTPRoute on the Gateway, sending everything to the shared Service."""
    return {
        "apiVersion": f"{GW}/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": APPS},
        "spec": {
            "parentRefs": [{"name": GATEWAY, "namespace": INFRA}],
            "rules": [{"backendRefs": [{"name": SERVICE, "port": 80}]}],
        },
    }


def route_list(names: Iterable[str]) -> str:
    """A `kind: List` of routes as JSON: what `kubectl create -f` sends one by one."""
    items = [route(name) for name in names]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def retry_marker(annotation: str | None) -> int | None:
    """The `maxRetries` every context of the RetryPolicy entry says; None when they differ,
    when there is none, or when the value is no annotation of ours."""
    try:
        value: Any = json.loads(annotation) if annotation else None
        entry = next(v for k, v in value["policies"].items() if k.startswith(RETRY_KIND_PREFIX))
        found = {context["effective"].get("maxRetries") for context in entry["contexts"]}
    except (ValueError, KeyError, TypeError, AttributeError, StopIteration):
        return None
    return found.pop() if len(found) == 1 else None


def annotation_of(obj: dict[str, Any]) -> str | None:
    value = (obj.get("metadata", {}).get("annotations") or {}).get(ANNOTATION)
    return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the API server calls a webhook: a URL and the CA that signed its certificate."""

    url: str
    ca_file: Path


def webhook_configurations(endpoint: Endpoint, suffix: str) -> list[dict[str, Any]]:
    """The shipped configurations — same rules, timeouts, failure policies — pointed at
    `endpoint`; the no-op is registered through exactly these, so only the answers differ."""
    ca_bundle = base64.b64encode(endpoint.ca_file.read_bytes()).decode()
    out = []
    for doc in yaml.safe_load_all(WEBHOOKS.read_text(encoding="utf-8")):
        if not doc:
            continue
        doc = copy.deepcopy(doc)
        doc["metadata"]["name"] = f"{doc['metadata']['name']}-{suffix}"
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": endpoint.url + path, "caBundle": ca_bundle}
        out.append(doc)
    return out


def hook_names() -> list[str]:
    """The names of the shipped webhooks: the `name` label of the API server's metrics."""
    docs = [d for d in yaml.safe_load_all(WEBHOOKS.read_text(encoding="utf-8")) if d]
    return [hook["name"] for doc in docs for hook in doc["webhooks"]]


def annotation_value(marker: int) -> str:
    """Our annotation on a route of this world, as the core computes it (the floor sends it)."""
    from webhook.core.annotation.summary import summarize
    from webhook.core.model.refs import key_of
    from webhook.core.model.settings import Settings
    from webhook.core.state.store import Store

    store = Store()
    for obj in [*policy_crds(), *base_objects(marker), route("r-0")]:
        store.upsert(obj)
    key = key_of(route("r-0"))
    assert key is not None
    value = summarize(key, store, Settings())
    assert value is not None
    return value
