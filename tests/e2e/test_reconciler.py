"""The reconciler against a real API server: `policy-webhook serve` processes in cluster mode.

No webhook configuration is registered here, so every annotation seen was written by the
reconciler. Each check compares the annotation of every object of the example cluster (plus a
few of our own) with a fresh computation: `webhook.core.annotation.summary` over a store filled from
`kubectl get -o json` of the same objects. Leader election runs on a Lease of this module's
own, with the default timings (lease 15 s), so a killed leader is replaced within ~17 s.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from convergence import (
    GW,
    KEY,
    apply,
    converge,
    delete,
    leading,
    patches,
    policy,
    skips,
    snapshot,
    wait_for_annotation,
    wait_until,
    without_ours,
    wrong,
)
from webhook_harness import WebhookProcess, apply_example_cluster

from webhook.core.model import kinds
from webhook.core.model.refs import ObjectKey

if TYPE_CHECKING:
    from cluster import LocalCluster

LEASE = "e2e-reconciler"
NAMESPACES = ("infra", "apps", "shop", "sandbox", "recon")

# Objects of our own beside the example cluster, with a foreign label and annotation each.
MINE = f"""
apiVersion: v1
kind: Namespace
metadata: {{name: recon, labels: {{gateway-access: "true"}}}}
---
apiVersion: v1
kind: Service
metadata:
  name: lonely
  namespace: recon
  labels: {{team: recon}}
  annotations: {{note.example.com/keep: "me", {KEY}: stale-from-an-old-run}}
spec:
  selector: {{app: lonely}}
  ports: [{{name: http, port: 80, targetPort: 8080, protocol: TCP}}]
---
apiVersion: v1
kind: Service
metadata: {{name: backend, namespace: recon}}
spec:
  selector: {{app: backend}}
  ports: [{{name: http, port: 80, targetPort: 8080, protocol: TCP}}]
---
apiVersion: {GW}/v1
kind: HTTPRoute
metadata:
  name: web
  namespace: recon
  labels: {{team: recon}}
  annotations: {{note.example.com/keep: "me too"}}
spec:
  parentRefs: [{{name: gw, namespace: infra}}]
  rules: [{{name: main, backendRefs: [{{name: backend, port: 80}}]}}]
"""


def health_on_lonely(path: str) -> dict[str, Any]:
    """Direct, on a Service nothing else reaches: its annotation is this policy or nothing."""
    target = {"group": "", "kind": "Service", "name": "lonely"}
    return policy(
        "HealthCheckPolicy", "recon", "lonely-health", {"targetRefs": [target], "path": path}
    )


def color_on_gateway(color: str) -> dict[str, Any]:
    """Inherited, on infra/gw: fans out to every route and backend below it."""
    target = {"group": GW, "kind": "Gateway", "name": "gw"}
    return policy(
        "ColorPolicy", "infra", "e2e-color", {"targetRefs": [target], "override": {"color": color}}
    )


def color_on_web(color: str) -> dict[str, Any]:
    target = {"group": GW, "kind": "HTTPRoute", "name": "web"}
    return policy(
        "ColorPolicy", "recon", "web-color", {"targetRefs": [target], "default": {"color": color}}
    )


# --- reading the cluster ------------------------------------------------------------------------


def watched(key: ObjectKey) -> bool:
    """Objects of this module's world (other tests' objects share the cluster)."""
    return key.group_kind in kinds.ANNOTATED_KINDS and (
        key.namespace in NAMESPACES or key == ObjectKey(GW, "GatewayClass", "", "acme")
    )


LONELY = "/api/v1/namespaces/recon/services/lonely"
STOREFRONT = f"/apis/{GW}/v1/namespaces/apps/httproutes/storefront"
WEB = f"/apis/{GW}/v1/namespaces/recon/httproutes/web"

# --- fixtures ----------------------------------------------------------------------------------


class Webhooks:
    """The webhook processes of this module, each stopped by PID at the end."""

    def __init__(self, cluster: LocalCluster, workdir: Path) -> None:
        self.cluster, self.workdir = cluster, workdir
        self.started: list[WebhookProcess] = []

    def start(self, name: str) -> WebhookProcess:
        process = WebhookProcess(
            self.cluster, self.workdir, name=name, args=["--leader-election-name", LEASE]
        )
        self.started.append(process)
        process.start()
        return process

    def stop_all(self) -> None:
        for process in self.started:
            process.stop()
            print(f"\n[e2e] {process.name} log: {process.log_path}")


@pytest.fixture(scope="module")
def world(cluster: LocalCluster) -> Iterator[None]:
    """The example cluster plus our objects, one of them carrying a stale annotation of ours."""
    apply_example_cluster(cluster)
    cluster.apply(MINE)
    # Also a wrong value on an example object, as a webhook of an older version could leave.
    cluster.kubectl("annotate", "--overwrite", "service", "bar", "-n", "apps", f"{KEY}=stale")
    yield
    for obj in (health_on_lonely("/"), color_on_gateway("x"), color_on_web("x")):
        delete(cluster, obj)
    cluster.kubectl("delete", "-f", "-", "--ignore-not-found", input=MINE.split("---", 1)[1])


@pytest.fixture(scope="module")
def webhooks(
    cluster: LocalCluster, world: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Webhooks]:
    started = Webhooks(cluster, tmp_path_factory.mktemp("reconciler"))
    try:
        yield started
    finally:
        started.stop_all()
        cluster.kubectl("delete", "lease", LEASE, "-n", "default", "--ignore-not-found")


# --- the tests (in order: each one starts from where the previous one left) ----------------------


def test_existing_objects_are_brought_up_to_date_at_start(
    cluster: LocalCluster, webhooks: Webhooks
) -> None:
    assert wrong(cluster, watched), "the world starts with stale annotations"
    before = snapshot(cluster, watched)
    started = time.monotonic()
    a = webhooks.start("reconciler-a")
    wait_until(lambda: leading(a), 20, "a lone replica leads")
    took = converge(cluster, watched)
    total = time.monotonic() - started
    sent, skipped = patches(a), skips(a)
    print(
        f"\n[e2e] start: converged {took:.2f}s after ready ({total:.2f}s after spawn); "
        f"{sent} patches sent, {skipped} skipped"
    )
    assert sent > 0 and skipped >= 0
    assert without_ours(snapshot(cluster, watched)) == without_ours(before), (
        "only our annotation moved"
    )
    lonely = cluster.get_json("service", "lonely", "-n", "recon")["metadata"]["annotations"]
    lonely.pop("kubectl.kubernetes.io/last-applied-configuration")
    assert lonely == {"note.example.com/keep": "me"}, "stale value of ours removed, theirs kept"


def test_a_policy_is_reflected_refreshed_and_removed_without_a_trace(
    cluster: LocalCluster, webhooks: Webhooks
) -> None:
    (a,) = webhooks.started
    before = snapshot(cluster, watched)
    sent_before = patches(a)

    # Each time runs from the start of `kubectl apply`/`delete` (whose own share is printed).
    direct = wait_for_annotation(
        cluster, LONELY, lambda v: v is not None and "/healthz" in v,
        change=lambda: apply(cluster, health_on_lonely("/healthz")),
    )  # fmt: skip
    fanned = wait_for_annotation(
        cluster, STOREFRONT, lambda v: v is not None and "green" in v,
        change=lambda: apply(cluster, color_on_gateway("green")),
    )  # fmt: skip
    converge(cluster, watched)
    sent_create = patches(a) - sent_before

    refreshed = wait_for_annotation(
        cluster, STOREFRONT, lambda v: v is not None and "purple" in v,
        change=lambda: apply(cluster, health_on_lonely("/livez"), color_on_gateway("purple")),
    )  # fmt: skip
    wait_for_annotation(cluster, LONELY, lambda v: v is not None and "/livez" in v)
    converge(cluster, watched)

    delete(cluster, color_on_gateway("purple"))
    removed = wait_for_annotation(
        cluster, LONELY, lambda v: v is None,
        change=lambda: delete(cluster, health_on_lonely("/livez")),
    )  # fmt: skip
    converge(cluster, watched)

    def ms(pair: tuple[float, float]) -> str:
        return f"{pair[1] * 1000:.0f} ms (kubectl {pair[0] * 1000:.0f} ms of it)"

    print(
        f"\n[e2e] kubectl → annotation: Direct policy → its Service {ms(direct)}; Inherited "
        f"policy on a Gateway → a route below {ms(fanned)}; update → {ms(refreshed)}; "
        f"delete → annotation gone {ms(removed)}; {sent_create} patches for both creates"
    )
    assert snapshot(cluster, watched) == before, "deleting the policies left no trace anywhere"


def test_only_the_leader_patches_and_a_killed_leader_hands_over(
    cluster: LocalCluster, webhooks: Webhooks
) -> None:
    (a,) = webhooks.started
    b = webhooks.start("reconciler-b")
    time.sleep(3)  # a few renew periods of the Lease
    assert leading(a) and not leading(b)
    assert cluster.get_json("lease", LEASE, "-n", "default")["spec"]["holderIdentity"] == a.name

    apply(cluster, color_on_web("red"))
    wait_for_annotation(cluster, WEB, lambda v: v is not None and '"red"' in v)
    converge(cluster, watched)
    time.sleep(1)
    assert patches(b) == 0, "a replica that does not lead never patches"
    fields = cluster.get_json("httproute", "web", "-n", "recon", "--show-managed-fields")
    ours = [f for f in fields["metadata"]["managedFields"] if f["manager"] == "policy-webhook"]
    assert [f["fieldsV1"] for f in ours] == [{"f:metadata": {"f:annotations": {f"f:{KEY}": {}}}}]

    a.stop(signal.SIGKILL)  # no chance to release the Lease: B waits for it to expire
    killed = time.monotonic()
    apply(cluster, color_on_web("blue"))  # while nobody leads
    wait_until(lambda: leading(b), 30, "the other replica takes over")
    took_lead = time.monotonic() - killed
    wait_for_annotation(cluster, WEB, lambda v: v is not None and '"blue"' in v, timeout=30)
    converge(cluster, watched)
    print(
        f"\n[e2e] leader SIGKILLed: replica b leads after {took_lead:.1f}s (lease 15 s), "
        f"converged after {time.monotonic() - killed:.1f}s; b sent {patches(b)} patches, "
        f"skipped {skips(b)}"
    )
    assert patches(b) >= 1


def test_a_restart_ends_with_correct_annotations(cluster: LocalCluster, webhooks: Webhooks) -> None:
    b = webhooks.started[-1]
    b.stop()  # graceful: releases the Lease
    # Changes nobody reconciles: a policy goes, a route moves to one listener only.
    delete(cluster, color_on_web("blue"))
    moved = json.dumps([
        {"op": "replace", "path": "/spec/parentRefs",
         "value": [{"name": "gw", "namespace": "infra", "sectionName": "https"}]},
    ])  # fmt: skip
    cluster.kubectl("patch", "httproute", "web", "-n", "recon", "--type=json", "-p", moved)
    stale = wrong(cluster, watched)
    assert stale, "the changes made annotations stale"

    c = webhooks.start("reconciler-c")
    wait_until(lambda: leading(c), 20, "the restarted replica leads at once (Lease released)")
    took = converge(cluster, watched)
    print(
        f"\n[e2e] restart: {len(stale)} stale annotations fixed in {took:.2f}s; "
        f"{patches(c)} patches sent, {skips(c)} skipped"
    )
    assert patches(c) == len(stale), "exactly the stale objects were patched"
    parent_refs = cluster.get_json("httproute", "web", "-n", "recon")["spec"]["parentRefs"]
    assert [ref.get("sectionName") for ref in parent_refs] == ["https"]


def test_the_crd_used_here_accepts_empty_groups(cluster: LocalCluster, world: None) -> None:
    """The example objects with `group: ""` were stored as written (provision.py patches the
    API server's null check, which refused them)."""
    route = cluster.get_json("httproute", "mesh-route", "-n", "apps")
    assert route["spec"]["parentRefs"][0]["group"] == ""
    policy_obj = cluster.get_json("healthcheckpolicy", "foo-health", "-n", "apps")
    assert policy_obj["spec"]["targetRefs"][0]["group"] == ""
