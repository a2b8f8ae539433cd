"""The PolicyReport writer against a fake API server (a dict of reports behind
`kubeapi.request_json`): what it sends and, above all, what it does not — nothing while the
findings stay the same, however busy the store. The real API server, with the CRDs of
manifests/components/policy-reports, is tests/e2e/test_policy_reports.py.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures.engine import CLUSTER, CRDS, docs, policy, route, store_of
from webhook.core.annotation.dependencies import AffectedFeed
from webhook.core.model import kinds
from webhook.core.model.refs import GroupKind
from webhook.core.model.settings import Settings
from webhook.core.state.store import Store
from webhook.shell.cluster import kubeapi
from webhook.shell.cluster import policy_reports as writer_module
from webhook.shell.cluster.informers import CRDS as CRD_RESOURCE
from webhook.shell.cluster.policy_reports import PolicyReportWriter
from webhook.shell.cluster.webhook_rules import CONFIGURATIONS, WebhookRulesKeeper
from webhook.shell.process.metrics import Metrics

REPORT_CRDS = "\n---\n".join(
    f"""
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: {plural}.wgpolicyk8s.io}}
spec:
  group: wgpolicyk8s.io
  scope: {scope}
  names: {{kind: {kind}, plural: {plural}}}
  versions: [{{name: v1alpha2, served: true, storage: true}}]
"""
    for plural, kind, scope in (
        ("policyreports", "PolicyReport", "Namespaced"),
        ("clusterpolicyreports", "ClusterPolicyReport", "Cluster"),
    )
)
RETRY = kubeapi.Resource("policies.example.com", "v1alpha1", "retrypolicies", "RetryPolicy")
ON_R = policy("on-r", "HTTPRoute/apps/r", "default: {maxRetries: 3}")
ON_GW = policy("on-gw", "Gateway/infra/gw", "default: {maxRetries: 1}")
HOOK = "policies.policy-attachment.dev"


class Source:
    """What the writer reads of the informers: the first sync, the resources, the 403s."""

    def __init__(self) -> None:
        self.synced = asyncio.Event()
        self.synced.set()
        self.refused: dict[GroupKind, kubeapi.Resource] = {}

    def watched(self) -> dict[GroupKind, kubeapi.Resource]:
        return {kinds.CRD: CRD_RESOURCE, RETRY.group_kind: RETRY}

    def forbidden(self) -> dict[GroupKind, kubeapi.Resource]:
        return self.refused


class Server:
    """Reports by path, with resourceVersions, as an API server keeps them; every request."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.version = 100
        self.forbidden = False  # RBAC without the component's ClusterRole
        # The policy webhook sends every kind (None: there is no configuration, a 404).
        every = {"apiGroups": ["*"], "resources": ["*"], "operations": ["*"]}
        self.configuration: dict[str, Any] | None = {
            "webhooks": [{"name": "policies.policy-attachment.dev", "rules": [every]}]
        }
        monkeypatch.setattr(kubeapi, "request_json", self.request_json)

    def leave_report_of_an_earlier_term(self, namespace: str) -> None:
        """Our report in `namespace`, as a replica that led before this one wrote it."""
        self.objects[writer_module._object_path(namespace)] = {
            "apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
            "metadata": {"name": "policy-attachment", "namespace": namespace, "resourceVersion": "1",
                         "labels": {"app.kubernetes.io/managed-by": "policy-attachment-webhook"}},
        }  # fmt: skip

    def writes(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p in self.requests if m != "GET"]

    async def request_json(
        self, api: object, method: str, path: str, *, body: Any = None, query: Any = (), **_: Any
    ) -> dict[str, Any]:
        self.requests.append((method, path))
        if self.forbidden and "wgpolicyk8s.io" in path:
            raise kubeapi.ApiError(403, "Forbidden", "cannot list policyreports")
        if path.startswith(CONFIGURATIONS):
            if self.configuration is None:
                raise kubeapi.ApiError(404, "NotFound", "no configuration")
            return copy.deepcopy(self.configuration)
        if method == "GET" and path.endswith("/policyreports"):  # the list of all namespaces
            return {"items": [copy.deepcopy(o) for o in self.objects.values()
                              if o["kind"] == "PolicyReport"]}  # fmt: skip
        if method == "GET":
            if path not in self.objects:
                raise kubeapi.ApiError(404, "NotFound", "not found")
            return copy.deepcopy(self.objects[path])
        if method == "DELETE":
            self.objects.pop(path, None)
            return {"kind": "Status"}
        target = path if method == "PUT" else f"{path}/{body['metadata']['name']}"
        held = self.objects.get(target)
        if method == "POST" and held is not None:
            raise kubeapi.ApiError(409, "AlreadyExists", "exists")
        if method == "PUT" and (held is None or held["metadata"]["resourceVersion"] != body["metadata"]["resourceVersion"]):  # fmt: skip
            raise kubeapi.ApiError(409, "Conflict", "modified")
        self.version += 1
        stored = json.loads(json.dumps(body, sort_keys=True))
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.objects[target] = stored
        return copy.deepcopy(stored)

    def report(self, namespace: str) -> dict[str, Any] | None:
        return self.objects.get(writer_module._object_path(namespace))


def writer(
    store: Store,
    metrics: Metrics | None = None,
    period: float = 10.0,
    keeper: WebhookRulesKeeper | None = None,
) -> PolicyReportWriter:
    return PolicyReportWriter(
        object(),  # type: ignore[arg-type]  # the fake answers every request
        store,
        AffectedFeed(store),
        Source(),  # type: ignore[arg-type]
        Settings(),
        metrics or Metrics(),
        configuration="policy-webhook",
        keeper=keeper,
        period=period,
    )


def rounds(kept: PolicyReportWriter, n: int = 1) -> None:
    async def run() -> None:
        for _ in range(n):
            await kept.sync_once()

    asyncio.run(run())


def rules_of(server: Server, namespace: str) -> list[str]:
    found = server.report(namespace)
    assert found is not None, f"no report in {namespace!r}"
    return [r["policy"] for r in found["results"]]


def series(metrics: Metrics) -> dict[tuple[str, ...], float]:
    """The findings gauge (SPEC §8.5): (namespace, rule, result) → value."""
    return {
        tuple(s.labels[n] for n in ("namespace", "rule", "result")): s.value
        for metric in metrics.policy_findings.collect()
        for s in metric.samples
    }


def test_reports_are_written_once_and_not_again_while_nothing_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = Server(monkeypatch)
    store = store_of(CRDS, CLUSTER, REPORT_CRDS, ON_R, ON_GW)
    kept = writer(store)
    rounds(kept)
    assert sorted(server.writes()) == [
        ("POST", "/apis/wgpolicyk8s.io/v1alpha2/clusterpolicyreports"),
        ("POST", "/apis/wgpolicyk8s.io/v1alpha2/namespaces/apps/policyreports"),
        ("POST", "/apis/wgpolicyk8s.io/v1alpha2/namespaces/infra/policyreports"),
    ]
    versions = {path: obj["metadata"]["resourceVersion"] for path, obj in server.objects.items()}
    # Churn no finding reads: a Service elsewhere, new and changed, a route's status.
    for port in (80, 81, 82):
        store.upsert({"apiVersion": "v1", "kind": "Service",
                      "metadata": {"name": "busy", "namespace": "infra"}, "spec": {"ports": [{"port": port}]}})  # fmt: skip
        r = copy.deepcopy(dict(store.get(route("apps", "r")) or {}))
        store.upsert({**r, "status": {"parents": [{"port": port}]}})
        rounds(kept)
    rounds(kept, 3)
    assert len(server.writes()) == 3
    assert {p: o["metadata"]["resourceVersion"] for p, o in server.objects.items()} == versions


def test_a_finding_that_appears_rewrites_that_namespace_only_and_goes_when_fixed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = Server(monkeypatch)
    store = store_of(CRDS, CLUSTER, REPORT_CRDS, ON_R, ON_GW)
    kept = writer(store)
    rounds(kept)
    r = store.delete(route("apps", "r"))
    assert r is not None
    rounds(kept)
    assert rules_of(server, "apps") == ["PA-T06"]
    assert server.writes()[3:] == [("PUT", writer_module._object_path("apps"))]
    report = server.report("apps")
    assert report is not None and report["summary"]["warn"] == 1
    store.upsert(r)
    rounds(kept)
    assert rules_of(server, "apps") == []
    assert len(server.writes()) == 5


def test_a_namespace_whose_policies_are_gone_loses_its_report_even_one_from_an_earlier_term(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = Server(monkeypatch)
    server.leave_report_of_an_earlier_term("old")
    store = store_of(CRDS, CLUSTER, REPORT_CRDS, ON_R, ON_GW)
    kept = writer(store)
    rounds(kept)
    assert server.report("old") is None
    store.delete(next(k for k in kept.book.audits() if k.namespace == "infra"))
    rounds(kept)
    assert server.report("infra") is None and server.report("apps") is not None
    assert kept.deletes == 2


def test_a_report_changed_by_someone_else_is_read_again_and_put_right(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = Server(monkeypatch)
    store = store_of(CRDS, CLUSTER, REPORT_CRDS, ON_R)
    kept = writer(store)
    rounds(kept)
    path = writer_module._object_path("apps")
    server.objects[path]["metadata"]["resourceVersion"] = "999"  # an edit we did not see
    server.objects[path]["results"] = [{"policy": "PA-X"}]
    store.delete(route("apps", "r"))
    rounds(kept, 2)  # 409, read again; then the write
    assert rules_of(server, "apps") == ["PA-T06"]


REPORTS_RBAC = Path(__file__).parents[3] / "manifests/components/policy-reports/rbac.yaml"


def _verb(method: str, path: str) -> str:
    """The RBAC verb the API server checks for a request on a report or their collection."""
    collection = path.endswith(("/policyreports", "/clusterpolicyreports"))
    return {"GET": "list" if collection else "get", "POST": "create", "PUT": "update",
            "DELETE": "delete", "PATCH": "patch"}[method]  # fmt: skip


def test_every_request_for_reports_is_one_the_components_role_allows_and_it_allows_no_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Least privilege, read from both sides: the shipped ClusterRole against the verbs of the
    requests the writer makes over its whole life — create, find unchanged, replace after a
    finding appears and after someone else's edit (409, read again), list and delete the
    reports of namespaces that no longer hold policies."""
    server = Server(monkeypatch)
    server.leave_report_of_an_earlier_term("old")
    store = store_of(CRDS, CLUSTER, REPORT_CRDS, ON_R, ON_GW)
    kept = writer(store)
    rounds(kept, 2)
    path = writer_module._object_path("apps")
    server.objects[path]["metadata"]["resourceVersion"] = "999"  # an edit we did not see
    store.delete(route("apps", "r"))
    rounds(kept, 2)
    store.delete(next(k for k in kept.book.audits() if k.namespace == "infra"))
    rounds(kept)
    used = {_verb(m, p) for m, p in server.requests if "wgpolicyk8s.io" in p}
    (role,) = [
        d for d in yaml.safe_load_all(REPORTS_RBAC.read_text()) if d["kind"] == "ClusterRole"
    ]
    (rule,) = role["rules"]
    assert used == set(rule["verbs"]) == {"get", "list", "create", "update", "delete"}


def test_without_the_crds_nothing_is_sent_and_one_line_says_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server = Server(monkeypatch)
    store = store_of(CRDS, CLUSTER, ON_R)
    kept = writer(store)

    async def term() -> None:
        kept.set_leading(True)
        for _ in range(5):
            store.delete(route("apps", "r"))
            store.upsert(docs(CLUSTER)[4])
            await asyncio.sleep(0.05)
        await kept.stop()

    with caplog.at_level(logging.INFO, logger=writer_module.__name__):
        asyncio.run(term())
    assert server.requests == []
    (line,) = [r.getMessage() for r in caplog.records]
    assert "no PolicyReports" in line and "manifests/components/policy-reports" in line


def test_the_leader_loop_writes_within_a_second_of_a_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = Server(monkeypatch)
    store = store_of(CRDS, CLUSTER, REPORT_CRDS, ON_R)
    kept = writer(store)

    async def term() -> float:
        kept.set_leading(True)
        while kept.writes < 2:
            await asyncio.sleep(0.01)
        started = asyncio.get_running_loop().time()
        store.delete(route("apps", "r"))
        while "PA-T06" not in json.dumps(server.report("apps")):
            await asyncio.sleep(0.01)
        took = asyncio.get_running_loop().time() - started
        await kept.stop()
        return took

    assert asyncio.run(asyncio.wait_for(term(), 10)) < 1.0


def test_the_findings_gauge_has_series_only_where_there_are_findings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    Server(monkeypatch)
    metrics = Metrics()
    store = store_of(CRDS, CLUSTER, REPORT_CRDS, ON_R, ON_GW)
    kept = writer(store, metrics)
    rounds(kept)
    assert series(metrics) == {}
    r = store.delete(route("apps", "r"))
    rounds(kept)
    assert series(metrics) == {("apps", "PA-T06", "warn"): 1.0}
    assert r is not None
    store.upsert(r)
    rounds(kept)
    assert series(metrics) == {}


def test_kind_findings_count_in_the_cluster_series_and_a_replica_that_steps_down_exports_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = Server(monkeypatch)
    server.configuration = {"webhooks": [{"name": HOOK, "rules": []}]}
    metrics = Metrics()
    store = store_of(CRDS, CLUSTER, REPORT_CRDS, ON_R)
    store.delete(route("apps", "r"))
    kept = writer(store, metrics)
    rounds(kept, writer_module.UNSENT_READINGS)
    assert series(metrics) == {("", "PA-K02", "warn"): 1.0, ("apps", "PA-T06", "warn"): 1.0}

    async def step_down() -> None:
        kept.set_leading(True)
        await asyncio.sleep(0)
        kept.set_leading(False)  # the next leader speaks for the cluster

    asyncio.run(step_down())
    assert series(metrics) == {}


def test_a_kind_left_out_of_the_rules_reading_after_reading_is_pa_k02_one_refused_pa_k03(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = Server(monkeypatch)
    hook: dict[str, Any] = {"name": "policies.policy-attachment.dev", "rules": []}
    server.configuration = {"metadata": {"name": "policy-webhook"}, "webhooks": [hook]}
    kept = writer(store_of(CRDS, CLUSTER, REPORT_CRDS, ON_R))
    rounds(kept, writer_module.UNSENT_READINGS - 1)
    assert rules_of(server, "") == []  # the rules keeper may be adding it right now
    rounds(kept)
    assert rules_of(server, "") == ["PA-K02"]
    hook["rules"] = [{"apiGroups": ["policies.example.com"], "resources": ["retrypolicies"],
                      "operations": ["CREATE", "UPDATE"], "apiVersions": ["*"]}]  # fmt: skip
    rounds(kept)
    assert rules_of(server, "") == []
    kept.source.refused = {RETRY.group_kind: RETRY}  # type: ignore[attr-defined]
    rounds(kept)
    (found,) = (server.report("") or {})["results"]
    assert found["policy"] == "PA-K03" and "retrypolicies.policies.example.com" in found["message"]
    assert found["resources"][0]["kind"] == "CustomResourceDefinition"


def test_a_refusal_is_warned_once_then_tried_quietly_until_it_passes(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server = Server(monkeypatch)
    server.forbidden = True
    kept = writer(store_of(CRDS, CLUSTER, REPORT_CRDS, ON_R), period=0.05)

    def recovered() -> bool:
        return any(r.getMessage() == "policy reports kept again" for r in caplog.records)

    async def term() -> None:
        kept.set_leading(True)
        while len(server.requests) < 10:  # round after round refused
            await asyncio.sleep(0.01)
        server.forbidden = False
        # The reports are written before the round that wrote them ends and says so: stopping
        # at the second write could cancel that round before its line (seen on a busy machine).
        while kept.writes < 2 or not recovered():
            await asyncio.sleep(0.01)
        await kept.stop()

    with caplog.at_level(logging.DEBUG, logger=writer_module.__name__):
        asyncio.run(asyncio.wait_for(term(), 10))  # a recovery never said: TimeoutError
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "RBAC" in warned[0], warned
    assert recovered()
    assert rules_of(server, "apps") == []


def test_with_the_rules_keeper_its_reading_serves_and_the_writer_reads_no_configuration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The keeper reads the configuration every round; PA-K02 is judged against that reading
    (the server's own, which sends every kind, is never asked for)."""
    server = Server(monkeypatch)
    store = store_of(CRDS, CLUSTER, REPORT_CRDS, ON_R)
    keeper = WebhookRulesKeeper(
        object(),  # type: ignore[arg-type]  # never runs a round here
        store,
        Source(),  # type: ignore[arg-type]
        Metrics(),
        configuration="policy-webhook",
        namespace="policy-webhook",
    )
    kept = writer(store, keeper=keeper)
    rounds(kept, writer_module.UNSENT_READINGS)
    assert rules_of(server, "") == []  # the keeper has read nothing yet: nothing said
    keeper.configuration_read = {"webhooks": [{"name": HOOK, "rules": []}]}
    rounds(kept, writer_module.UNSENT_READINGS)
    assert rules_of(server, "") == ["PA-K02"]
    assert [p for _, p in server.requests if p.startswith(CONFIGURATIONS)] == []


def test_without_the_crds_only_a_crds_write_wakes_the_writer_and_then_it_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bulk create of routes on a cluster without the report CRDs costs the writer nothing;
    the CRDs, once installed, start the reports without a restart."""
    server = Server(monkeypatch)
    store = store_of(CRDS, CLUSTER, ON_R)
    kept = writer(store)
    asked: list[bool] = []
    installed = kept._installed

    def counted() -> bool:
        asked.append(True)
        return installed()

    monkeypatch.setattr(kept, "_installed", counted)

    async def term() -> tuple[int, int]:
        kept.set_leading(True)
        while not asked:
            await asyncio.sleep(0.01)
        for _ in range(50):
            store.delete(route("apps", "r"))
            store.upsert(docs(CLUSTER)[4])
            await asyncio.sleep(0)
        await asyncio.sleep(0.05)
        during_routes = len(asked)
        for crd in docs(REPORT_CRDS):
            store.upsert(crd)
        while kept.writes == 0:
            await asyncio.sleep(0.01)
        await kept.stop()
        return during_routes, kept.writes

    during_routes, writes = asyncio.run(asyncio.wait_for(term(), 10))
    assert during_routes == 1, "100 route writes woke the writer"
    assert writes > 0 and server.requests
