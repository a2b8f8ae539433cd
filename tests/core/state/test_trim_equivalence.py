"""A store of trimmed objects computes what a store of the same objects whole computes.

`trim` drops what nothing reads; if something did read it, a replica (whose informers trim)
and `policy-webhook check` (which does not) would answer differently. Held two ways: every
summary of random clusters whose routes carry matches, filters, hostnames, weights and
backends of other groups; and the verdict of every real-world case (`tests/realworld`, the
vendors' policies against routes as users write them), finding for finding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.core.rules.test_realworld import CASES, placed, state_paths
from tests.fixtures.budget import whole_clusters
from tests.fixtures.changes import GROUP, STARTS, Op, apply, base_store, grant_doc
from webhook.core.admission import validation as admission
from webhook.core.annotation.summary import summarize
from webhook.core.model import kinds
from webhook.core.model.refs import GATEWAY_GROUP, ObjectKey, key_of
from webhook.core.model.settings import Settings
from webhook.core.state.store import Store
from webhook.core.state.trim import trim
from webhook.shell.cli.manifests import load_store

# What routes say that no summary reads, drawn onto the random clusters' routes.
MATCHES = st.lists(
    st.fixed_dictionaries(
        {"path": st.fixed_dictionaries({"type": st.just("PathPrefix"), "value": st.sampled_from(["/", "/a"])})},
        optional={"headers": st.just([{"name": "x-beta", "value": "1"}])},
    ),
    max_size=2,
)  # fmt: skip
FILTERS = st.lists(
    st.sampled_from([
        {"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "a", "value": "b"}]}},
        {"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "bar", "port": 8080}}},
    ]),
    max_size=2,
)  # fmt: skip
# A backend of another group, named like a Service that exists: never that Service.
FOREIGN_BACKEND = {
    "group": "acme.io",
    "kind": "Service",
    "name": "bar",
    "namespace": "apps",
    "port": 8080,
}
# A backend in `shop`, which the grant below lets routes of `apps` reach.
CROSS_NAMESPACE_BACKEND = {"name": "baz", "namespace": "shop", "port": 80}
# On every random cluster, so that a context gained or lost anywhere shows in a summary: a
# policy above everything, and the grant that lets routes of `apps` reach Services of `shop`.
EVERYWHERE = {
    "apiVersion": f"{GROUP}/v1alpha1",
    "kind": "RetryPolicy",
    "metadata": {"name": "everywhere", "namespace": "infra"},
    "spec": {
        "targetRefs": [{"group": GATEWAY_GROUP, "kind": "GatewayClass", "name": "acme"}],
        "default": {"maxRetries": 1},
    },
}


BACKEND_EXTRAS = st.fixed_dictionaries(
    {}, optional={"weight": st.integers(0, 9), "filters": FILTERS}
)


@st.composite
def decorated(draw: st.DrawFn, route: Mapping[str, Any]) -> dict[str, Any]:
    spec = dict(route.get("spec") or {})
    if draw(st.booleans()):
        spec["hostnames"] = ["shop.example.com"]
    rules = []
    for rule in spec.get("rules") or []:
        refs = [{**ref, **draw(BACKEND_EXTRAS)} for ref in rule.get("backendRefs") or []]
        refs += draw(st.lists(st.sampled_from([FOREIGN_BACKEND, CROSS_NAMESPACE_BACKEND])))
        extras = {"matches": draw(MATCHES), "filters": draw(FILTERS)}
        rules.append({**rule, "backendRefs": refs, **extras})
    spec["rules"] = rules
    return {**route, "spec": spec}


@whole_clusters(100)
@given(start=STARTS, data=st.data())
def test_every_summary_of_a_random_cluster_is_the_same_trimmed(
    start: list[Op], data: st.DataObject
) -> None:
    cluster = base_store()
    for op in start:
        apply(cluster, op)
    cluster.upsert(EVERYWHERE)
    cluster.upsert(grant_doc(0))
    whole, trimmed = Store(), Store()
    for gk in sorted(cluster.all_kinds()):
        for obj in cluster.objects(gk):
            if gk in kinds.ROUTE_KINDS:
                obj = data.draw(decorated(obj))
            whole.upsert(obj)
            trimmed.upsert(trim(obj))
    keys = [k for gk in kinds.ANNOTATED_KINDS for k in whole.keys(gk)]
    values = {key: summarize(key, whole, Settings()) for key in keys}
    assert {key: summarize(key, trimmed, Settings()) for key in keys} == values


@pytest.fixture(scope="module")
def stores() -> tuple[Store, Store]:
    """The real-world state as `test_realworld` loads it, whole, and the same objects trimmed."""
    whole, _ = load_store(state_paths())
    trimmed = Store()
    for gk in sorted(whole.all_kinds()):
        for obj in whole.objects(gk):
            trimmed.upsert(trim(obj))
    return whole, trimmed


def test_the_real_world_routes_say_what_trimming_drops(stores: tuple[Store, Store]) -> None:
    """Otherwise the verdicts below would be the same under any trim."""
    whole, trimmed = stores
    routes = [k for gk in kinds.ROUTE_KINDS for k in whole.keys(gk)]
    assert len(routes) > 10
    changed = [k for k in routes if (whole.get(k) or {})["spec"] != (trimmed.get(k) or {})["spec"]]
    assert len(changed) > len(routes) // 2


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_a_real_world_policy_gets_the_same_verdict_and_findings(
    stores: tuple[Store, Store], case: Mapping[str, Any]
) -> None:
    whole, trimmed = stores
    obj = placed(case, whole)
    key: ObjectKey | None = key_of(obj)
    assert key is not None

    def said(view: Store) -> list[str]:
        verdict = admission.check_policy(obj, key.group_kind, view=view, settings=Settings())
        return [f.text for f in [*verdict.denials, *verdict.warnings]]

    assert said(trimmed) == said(whole)
