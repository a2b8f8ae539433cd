"""The informers against a real kube-apiserver: first sync, live changes, policy CRDs coming and
going, server-side watch timeouts and an API server restart.

Each test uses namespaces and API groups of its own, so the session's shared cluster may hold
anything else. 410 Gone, expired continue tokens and mid-stream drops are forced against a fake
in tests/shell/cluster/test_informers_fake.py, because a real server produces them only at its whim.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from webhook.core.model import kinds
from webhook.core.model.refs import GroupKind, ObjectKey
from webhook.core.state.store import Store
from webhook.core.state.trim import MARK, fingerprint, mark_of
from webhook.shell.cluster import kubeapi
from webhook.shell.cluster.informers import ClusterSource
from webhook.shell.cluster.kubeapi import connect
from webhook.shell.process import readiness as ready
from webhook.shell.process.metrics import Metrics
from webhook.shell.process.readiness import Readiness

if TYPE_CHECKING:
    from cluster import LocalCluster

KEY = "policy-attachment.dev/effective-policies"
GW = "gateway.networking.k8s.io"


def policy_crd(group: str, kind: str, *, label: str | None = "inherited") -> str:
    plural = kind.lower() + "s"
    labels = f"labels: {{{GW}/policy: {label}}}" if label else "labels: {}"
    return f"""
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {plural}.{group}
  {labels}
spec:
  group: {group}
  scope: Namespaced
  names: {{kind: {kind}, plural: {plural}, singular: {kind.lower()}, listKind: {kind}List}}
  versions:
  - name: v1alpha1
    served: true
    storage: false
    schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}
  - name: v1beta1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-preserve-unknown-fields: true
            properties:
              default: {{type: object, properties: {{color: {{type: string}}}}}}
          status: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"""


def gateway_objects(ns: str) -> str:
    return f"""
apiVersion: v1
kind: Namespace
metadata: {{name: {ns}, labels: {{gateway-access: "yes"}}}}
---
apiVersion: {GW}/v1
kind: GatewayClass
metadata: {{name: {ns}-class}}
spec: {{controllerName: example.com/{ns}}}
---
apiVersion: {GW}/v1
kind: Gateway
metadata:
  name: gw
  namespace: {ns}
  annotations: {{{KEY}: '{{"version":1}}', team: edge}}
spec:
  gatewayClassName: {ns}-class
  listeners: [{{name: http, protocol: HTTP, port: 80}}]
---
apiVersion: {GW}/v1
kind: HTTPRoute
metadata: {{name: route, namespace: {ns}}}
spec:
  parentRefs: [{{name: gw}}]
  rules: [{{name: main, backendRefs: [{{name: backend, port: 8080}}]}}]
---
apiVersion: {GW}/v1beta1
kind: ReferenceGrant
metadata: {{name: grant, namespace: {ns}}}
spec:
  from: [{{group: {GW}, kind: HTTPRoute, namespace: other}}]
  to: [{{group: {GW}, kind: Gateway}}]
---
apiVersion: v1
kind: Service
metadata: {{name: backend, namespace: {ns}}}
spec:
  selector: {{app: backend}}
  ports: [{{name: http, port: 8080, targetPort: 80, protocol: TCP}}]
"""


def policy(group: str, kind: str, ns: str, name: str, color: str) -> str:
    return f"""
apiVersion: {group}/v1beta1
kind: {kind}
metadata: {{name: {name}, namespace: {ns}}}
spec:
  targetRefs: [{{group: {GW}, kind: HTTPRoute, name: route}}]
  default: {{color: {color}}}
"""


def key(gk: GroupKind, ns: str, name: str) -> ObjectKey:
    return ObjectKey(gk.group, gk.kind, ns, name)


async def eventually(
    check: Callable[[], object], timeout: float = 10.0, *, since: float | None = None
) -> float:
    """Poll until `check()` is truthy; return the seconds since `since` (default: now)."""
    started = time.monotonic() if since is None else since
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.005)
    return time.monotonic() - started


async def kubectl(cluster: LocalCluster, *args: str, input: str | None = None) -> None:
    """kubectl in a thread, so that the informers keep running meanwhile."""
    await asyncio.to_thread(cluster.kubectl, *args, input=input)


@asynccontextmanager
async def running_source(
    cluster: LocalCluster, kubeconfig: Path | None = None, **options: Any
) -> AsyncIterator[ClusterSource]:
    api = await connect(str(kubeconfig or cluster.kubeconfig))
    source = ClusterSource(
        api, Store(), keep_annotation=KEY, metrics=Metrics(),
        readiness=Readiness(ready.STATE_SYNCED), **options,
    )  # fmt: skip
    try:
        async with source:
            yield source
    finally:
        await kubeapi.close(api)


def restarts(source: ClusterSource, kind: str) -> float:
    assert source.metrics is not None
    sample = source.metrics.registry.get_sample_value(
        "policy_webhook_watch_restarts_total", {"kind": kind}
    )
    return sample or 0.0


def test_first_sync_fills_the_store_with_trimmed_objects_of_every_kind(
    cluster: LocalCluster,
) -> None:
    group, kind = "sync.e2e.example.com", "ColorPolicy"
    cluster.apply(policy_crd(group, kind))
    cluster.kubectl("wait", "--for=condition=Established", f"crd/colorpolicys.{group}")
    cluster.apply(gateway_objects("inf-sync"))
    cluster.apply(policy(group, kind, "inf-sync", "blue", "blue"))
    color = GroupKind(group, kind)

    async def scenario() -> None:
        # page_size 2: every kind with more than two objects is listed over several pages.
        async with running_source(cluster, page_size=2) as source:
            assert source.readiness is not None
            assert not source.readiness()
            started = time.monotonic()
            assert await source.wait_synced(30)
            print(f"\n[e2e] first sync took {time.monotonic() - started:.2f}s")
            assert source.readiness()
            assert source.last_sync_age() < 5
            store = source.store

            gateway = store.get(key(kinds.GATEWAY, "inf-sync", "gw"))
            assert gateway is not None
            assert gateway["apiVersion"] == f"{GW}/v1"
            # Ours only, kept as its fingerprint (all the reconciler compares).
            assert "annotations" not in gateway["metadata"]
            assert mark_of(gateway, KEY) == gateway[MARK] == fingerprint('{"version":1}')
            assert "managedFields" not in gateway["metadata"]
            assert "status" not in gateway
            assert store.get(key(kinds.HTTP_ROUTE, "inf-sync", "route")) is not None
            assert store.get(key(kinds.GATEWAY_CLASS, "", "inf-sync-class")) is not None
            assert store.reference_grants("inf-sync")
            service = store.get(key(kinds.SERVICE, "inf-sync", "backend"))
            assert service is not None
            assert service["spec"] == {"ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}
            assert store.namespace_labels("inf-sync") == {"gateway-access": "yes"}

            # The policy kind is watched at its preferred version and parsed as a policy.
            assert source.watched()[color].version == "v1beta1"
            (found,) = store.policies_targeting(key(kinds.HTTP_ROUTE, "inf-sync", "route"))
            assert found.key == key(color, "inf-sync", "blue")

            # Nothing lost to pagination: the store has what kubectl lists.
            listed = cluster.get_json("namespaces")["items"]
            assert {k.name for k in store.keys(kinds.NAMESPACE)} >= {
                n["metadata"]["name"] for n in listed
            }

    asyncio.run(scenario())


def test_creates_updates_and_deletes_reach_the_store_within_seconds(cluster: LocalCluster) -> None:
    cluster.apply(gateway_objects("inf-live"))
    route = key(kinds.HTTP_ROUTE, "inf-live", "late-route")
    manifest = yaml.safe_load(
        """
        apiVersion: gateway.networking.k8s.io/v1
        kind: HTTPRoute
        metadata: {name: late-route, namespace: inf-live}
        spec: {parentRefs: [{name: gw}], rules: [{name: first}]}
        """
    )

    async def scenario() -> None:
        async with running_source(cluster) as source:
            assert await source.wait_synced(30)
            store = source.store
            # Timed from the start of the kubectl call, so kubectl's own run time is included.
            start = time.monotonic()
            await kubectl(cluster, "apply", "-f", "-", input=yaml.safe_dump(manifest))
            created = await eventually(lambda: store.get(route) is not None, since=start)

            manifest["spec"]["rules"].append({"name": "second"})
            start = time.monotonic()
            await kubectl(cluster, "apply", "-f", "-", input=yaml.safe_dump(manifest))
            updated = await eventually(
                lambda: len((store.get(route) or {}).get("spec", {}).get("rules", [])) == 2,
                since=start,
            )
            await kubectl(
                cluster, "annotate", "httproute", "late-route", "-n", "inf-live",
                f"{KEY}={{}}", "other=x",
            )  # fmt: skip
            await eventually(lambda: (store.get(route) or {}).get(MARK) == fingerprint("{}"))
            await kubectl(cluster, "label", "namespace", "inf-live", "tier=gold")
            await eventually(lambda: (store.namespace_labels("inf-live") or {}).get("tier"))

            start = time.monotonic()
            await kubectl(cluster, "delete", "httproute", "late-route", "-n", "inf-live")
            deleted = await eventually(lambda: store.get(route) is None, since=start)
            print(f"\n[e2e] create {created:.3f}s, update {updated:.3f}s, delete {deleted:.3f}s")
            assert source.metrics is not None
            count = source.metrics.registry.get_sample_value(
                "policy_webhook_store_objects", {"kind": str(kinds.HTTP_ROUTE)}
            )
            assert count == store.count(kinds.HTTP_ROUTE)

    asyncio.run(scenario())


def test_status_only_updates_do_not_wake_the_store_listeners(cluster: LocalCluster) -> None:
    cluster.apply(gateway_objects("inf-status"))
    gateway = key(kinds.GATEWAY, "inf-status", "gw")
    status = '{"status": {"addresses": [{"type": "IPAddress", "value": "10.0.0.9"}]}}'

    async def scenario() -> None:
        async with running_source(cluster) as source:
            assert await source.wait_synced(30)
            store = source.store
            seen: list[ObjectKey] = []
            store.subscribe(lambda k, old, new: seen.append(k))
            await kubectl(
                cluster, "patch", "gateway", "gw", "-n", "inf-status", "--subresource=status",
                "--type=merge", "-p", status,
            )  # fmt: skip
            # Events of one resource arrive in order: once the label is in, so was the status.
            await kubectl(cluster, "label", "gateway", "gw", "-n", "inf-status", "seen=yes")
            await eventually(lambda: (store.get(gateway) or {}).get("metadata", {}).get("labels"))
            assert seen == [gateway]  # the label change only

    asyncio.run(scenario())


def test_a_policy_crd_created_after_start_is_watched_live_and_dropped_with_its_objects(
    cluster: LocalCluster,
) -> None:
    group, kind = "live.e2e.example.com", "TintPolicy"
    gk = GroupKind(group, kind)
    crd_name = f"tintpolicys.{group}"
    cluster.apply(gateway_objects("inf-crd"))
    red = key(gk, "inf-crd", "red")

    async def scenario() -> None:
        async with running_source(cluster) as source:
            assert await source.wait_synced(30)
            store = source.store
            assert gk not in source.watched()

            start = time.monotonic()
            await kubectl(cluster, "apply", "-f", "-", input=policy_crd(group, kind))
            await eventually(lambda: gk in source.watched())
            watched = time.monotonic() - start
            await kubectl(cluster, "wait", "--for=condition=Established", f"crd/{crd_name}")
            await kubectl(
                cluster, "apply", "-f", "-", input=policy(group, kind, "inf-crd", "red", "red")
            )
            await eventually(lambda: store.policy(red) is not None)
            assert source.watched()[gk].version == "v1beta1"

            # Dropping the label makes it an ordinary CRD: no informer, no objects.
            await kubectl(cluster, "label", "crd", crd_name, f"{GW}/policy-")
            await eventually(lambda: gk not in source.watched() and store.count(gk) == 0)
            await kubectl(cluster, "label", "crd", crd_name, f"{GW}/policy=direct")
            await eventually(lambda: store.policy(red) is not None)
            assert store.profile(gk).policy_class == "Direct"

            start = time.monotonic()
            await kubectl(cluster, "delete", "crd", crd_name)
            dropped = await eventually(
                lambda: gk not in source.watched() and not store.count(gk), since=start
            )
            assert store.policy(red) is None
            print(
                f"\n[e2e] new policy CRD watched {watched:.2f}s after kubectl apply started; "
                f"deleted CRD's objects gone {dropped:.2f}s after kubectl delete started"
            )

    asyncio.run(scenario())


READER_ROLE = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: informer-reader}
rules:
- {apiGroups: [apiextensions.k8s.io], resources: [customresourcedefinitions], verbs: [list, watch]}
- {apiGroups: [gateway.networking.k8s.io], resources: ["*"], verbs: [list, watch]}
- {apiGroups: [""], resources: [services, namespaces], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: informer-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: informer-reader}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: informer-readers}]
"""


def test_a_policy_kind_rbac_does_not_grant_does_not_block_the_first_sync(
    cluster: LocalCluster,
) -> None:
    group, kind = "rbac.e2e.example.com", "ShadePolicy"
    gk = GroupKind(group, kind)
    cluster.apply(policy_crd(group, kind))
    cluster.kubectl("wait", "--for=condition=Established", f"crd/shadepolicys.{group}")
    cluster.apply(gateway_objects("inf-rbac"))
    cluster.apply(policy(group, kind, "inf-rbac", "grey", "grey"))
    cluster.apply(READER_ROLE)
    kubeconfig = cluster.create_user("informer-reader", groups=["informer-readers"])
    grey = key(gk, "inf-rbac", "grey")

    async def scenario() -> None:
        async with running_source(cluster, kubeconfig, backoff_cap=1.0) as source:
            assert await source.wait_synced(15)
            assert source.store.get(key(kinds.GATEWAY, "inf-rbac", "gw")) is not None
            assert gk in source.watched()
            assert source.store.count(gk) == 0
            # Granted later: the informer, still retrying, lists it without a restart.
            await kubectl(
                cluster, "create", "clusterrole", "shade-reader", "--verb=list,watch",
                f"--resource=shadepolicys.{group}",
            )  # fmt: skip
            await kubectl(
                cluster, "create", "clusterrolebinding", "shade-reader",
                "--clusterrole=shade-reader", "--group=informer-readers",
            )  # fmt: skip
            await eventually(lambda: source.store.policy(grey) is not None, 15)

    asyncio.run(scenario())


def test_watches_resume_after_server_side_timeouts_without_losing_events(
    cluster: LocalCluster,
) -> None:
    cluster.apply(gateway_objects("inf-timeout"))

    async def scenario() -> None:
        # timeoutSeconds 1: the server ends every watch within a second or two.
        async with running_source(cluster, watch_timeout=1.0) as source:
            assert await source.wait_synced(30)
            await asyncio.sleep(3)
            assert restarts(source, "Service") >= 1
            await kubectl(
                cluster, "create", "service", "clusterip", "after-timeouts", "-n", "inf-timeout",
                "--tcp=80:8080",
            )  # fmt: skip
            await eventually(
                lambda: source.store.get(key(kinds.SERVICE, "inf-timeout", "after-timeouts"))
            )

    asyncio.run(scenario())


def test_an_api_server_restart_is_survived_by_reconnecting(cluster: LocalCluster) -> None:
    cluster.apply(gateway_objects("inf-restart"))
    route = key(kinds.HTTP_ROUTE, "inf-restart", "route")

    async def scenario() -> None:
        async with running_source(cluster, backoff_cap=2.0) as source:
            assert await source.wait_synced(30)
            before = restarts(source, str(kinds.HTTP_ROUTE))
            await asyncio.to_thread(cluster.restart_apiserver)
            start = time.monotonic()
            await kubectl(cluster, "delete", "httproute", "route", "-n", "inf-restart")
            took = await eventually(lambda: source.store.get(route) is None, 30, since=start)
            assert restarts(source, str(kinds.HTTP_ROUTE)) > before
            print(f"\n[e2e] a delete after an API server restart reached the store in {took:.2f}s")

    asyncio.run(scenario())


def test_first_sync_of_many_objects(cluster: LocalCluster) -> None:
    count = 500
    docs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "inf-many"}}]
    docs += [
        {
            "apiVersion": f"{GW}/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": f"r{i:04}", "namespace": "inf-many", "labels": {"n": str(i)}},
            "spec": {
                "parentRefs": [{"name": "gw"}],
                "rules": [{"name": "main", "backendRefs": [{"name": "svc", "port": 80}]}],
            },
        }
        for i in range(count)
    ]
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump_all(docs), timeout=300)

    async def scenario() -> None:
        async with running_source(cluster) as source:
            started = time.monotonic()
            assert await source.wait_synced(60)
            took = time.monotonic() - started
            routes = sum(
                1 for k in source.store.keys(kinds.HTTP_ROUTE) if k.namespace == "inf-many"
            )
            assert routes == count
            total = sum(source.store.count(gk) for gk in source.watched())
            print(f"\n[e2e] first sync of {total} objects ({count} routes) in {took:.2f}s")
            assert took < 30

    asyncio.run(scenario())
