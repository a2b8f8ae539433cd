"""A vendor's own rule for policies of one kind on one target (catalog `conflict_keys`).

NGINX Gateway Fabric sorts the policies of a kind on one target by SPEC §4.4's order; a policy
that sets a field an earlier one (not itself Conflicted) sets too is Conflicted and applies
nothing there, and policies with no such field in common all apply, merged. SPEC's own rule
(§5.1: the Direct winner applies whole; §5.2: a tie broken field by field) stays for every
other kind.

The cluster is `tests.fixtures.engine.CLUSTER` (Gateway infra/gw → HTTPRoute apps/r on `https`
→ Services apps/foo and apps/bar) with NGINX Gateway Fabric's CRDs from the real-world table.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.fixtures import changes
from tests.fixtures.budget import whole_clusters
from tests.fixtures.engine import (
    CLUSTER,
    only,
    policy,
    reference_grant,
    result_of,
    route,
    service,
    store_of,
    verdict_of,
)
from tests.fixtures.paths import REALWORLD
from webhook.core.annotation import summary
from webhook.core.annotation.cache import SummaryCache
from webhook.core.engine import effective
from webhook.core.model.refs import GroupKind, ObjectKey
from webhook.core.state.overlay import OverlayView
from webhook.core.state.store import Store

NGINX_CRDS = (REALWORLD / "crds" / "nginx-gateway-fabric.yaml").read_text(encoding="utf-8")
OLDER, NEWER, NEWEST = "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z"


def nginx(kind: str, name: str, target: str, body: str, created: str) -> str:
    version = "v1alpha2" if kind == "ObservabilityPolicy" else "v1alpha1"
    return "---\n" + policy(
        name, target, body, kind=kind, api_version=f"gateway.nginx.org/{version}", created=created
    )


def upstream(name: str, body: str, created: str) -> str:
    return nginx("UpstreamSettingsPolicy", name, "Service/foo", body, created)


def client(name: str, body: str, created: str) -> str:
    return nginx("ClientSettingsPolicy", name, "Gateway/gw", body, created)


def store(*policies: str) -> Store:
    return store_of(NGINX_CRDS, CLUSTER, *policies)


def losers(view: Store, key: ObjectKey, kind: str) -> list[tuple[str, str, str]]:
    result = result_of(view, key, kind)
    assert result is not None
    return sorted(
        {(lo.policy, lo.field, lo.reason) for group in result.groups for lo in group.losers}
    )


def c01(view: Store, text: str) -> list[str]:
    verdict = verdict_of(view, text)
    assert verdict.allowed
    return [j.finding.message for j in verdict.judged if j.finding.rule_id == "PA-C01"]


# --- a Direct kind: UpstreamSettingsPolicy on a Service --------------------------------------


def test_direct_policies_setting_different_fields_both_apply() -> None:
    view = store(
        upstream("zone", "zoneSize: 1m", OLDER),
        upstream("keepalive", "keepAlive: {connections: 32}", NEWER),
    )
    assert only(view, service("apps", "foo"), "UpstreamSettingsPolicy") == {
        "zoneSize": "1m",
        "keepAlive": {"connections": 32},
    }
    assert losers(view, service("apps", "foo"), "UpstreamSettingsPolicy") == []


def test_a_direct_policy_setting_a_field_the_older_sets_applies_nothing() -> None:
    view = store(
        upstream("zone", "zoneSize: 1m", OLDER),
        upstream("both", "zoneSize: 2m\nkeepAlive: {connections: 32}", NEWER),
    )
    # Not even its keepAlive, which nothing else sets: it is Conflicted whole.
    assert only(view, service("apps", "foo"), "UpstreamSettingsPolicy") == {"zoneSize": "1m"}
    assert losers(view, service("apps", "foo"), "UpstreamSettingsPolicy") == [
        ("apps/both", "*", "conflicted: apps/zone also sets zoneSize and comes first (older)")
    ]


def test_a_field_set_below_a_key_counts_as_the_key() -> None:
    """ObservabilityPolicy conflicts on `tracing` as a whole, whatever is set inside it: read
    leaf by leaf, the two would not meet and would merge into one `tracing`."""
    view = store(
        nginx("ObservabilityPolicy", "a", "HTTPRoute/r", "tracing: {strategy: ratio}", OLDER),
        nginx("ObservabilityPolicy", "b", "HTTPRoute/r", "tracing: {ratio: 5}", NEWER),
    )
    assert only(view, route("apps", "r"), "ObservabilityPolicy") == {
        "tracing": {"strategy": "ratio"}
    }


def test_a_conflicted_policy_does_not_conflict_with_the_ones_after_it() -> None:
    view = store(
        upstream("first", "zoneSize: 1m", OLDER),
        upstream("second", "zoneSize: 2m\nloadBalancingMethod: random", NEWER),
        upstream("third", "loadBalancingMethod: ip_hash", NEWEST),
    )
    found = only(view, service("apps", "foo"), "UpstreamSettingsPolicy")
    assert found == {"zoneSize": "1m", "loadBalancingMethod": "ip_hash"}


# --- an Inherited kind: ClientSettingsPolicy on a Gateway ------------------------------------


def test_an_inherited_policy_conflicted_at_its_target_gives_nothing_below() -> None:
    view = store(
        client("older", "body: {maxSize: 10m}", OLDER),
        client("newer", "body: {maxSize: 20m}\nkeepAlive: {requests: 100}", NEWER),
    )
    # Field by field (SPEC §5.2) the newer one's keepAlive would apply; NGINX applies none of it.
    assert only(view, route("apps", "r"), "ClientSettingsPolicy") == {"body": {"maxSize": "10m"}}


def test_inherited_policies_setting_different_fields_merge() -> None:
    view = store(
        client("older", "body: {maxSize: 10m}", OLDER),
        client("newer", "keepAlive: {requests: 100}", NEWER),
    )
    assert only(view, route("apps", "r"), "ClientSettingsPolicy") == {
        "body": {"maxSize": "10m"},
        "keepAlive": {"requests": 100},
    }


def test_policies_at_different_rungs_follow_spec_precedence_not_the_conflict_rule() -> None:
    """The rule is per target: a route's policy is more specific than the Gateway's, as
    anywhere (SPEC §5.2), and both set the same field without either being Conflicted."""
    view = store(
        client("gw", "body: {maxSize: 10m}\nkeepAlive: {requests: 100}", OLDER),
        nginx("ClientSettingsPolicy", "rt", "HTTPRoute/r", "body: {maxSize: 1m}", NEWER),
    )
    assert only(view, route("apps", "r"), "ClientSettingsPolicy") == {
        "body": {"maxSize": "1m"},
        "keepAlive": {"requests": 100},
    }


# --- PA-C01 says what the vendor does ---------------------------------------------------------


def test_pa_c01_is_silent_for_policies_that_both_apply() -> None:
    view = store(upstream("zone", "zoneSize: 1m", OLDER))
    assert c01(view, upstream("keepalive", "keepAlive: {connections: 32}", NEWER)) == []


def test_pa_c01_names_the_field_both_set_and_who_is_conflicted() -> None:
    view = store(upstream("zone", "zoneSize: 1m", OLDER))
    assert c01(view, upstream("both", "zoneSize: 2m", NEWER)) == [
        "zone also sets zoneSize on it and wins (older): this one is Conflicted"
    ]
    view = store(upstream("later", "zoneSize: 2m", NEWER))
    assert c01(view, upstream("earlier", "zoneSize: 1m", OLDER)) == [
        "later also sets zoneSize on it; this one wins (older): that one is Conflicted"
    ]


def test_pa_c01_for_an_inherited_kind_says_conflicted_not_a_field_lost() -> None:
    view = store(client("older", "keepAlive: {timeout: {server: 5s}}", OLDER))
    (message,) = c01(view, client("newer", "keepAlive: {timeout: {header: 3s}}", NEWER))
    assert (
        message
        == "older also sets keepAlive.timeout on it and wins (older): this one is Conflicted"
    )


def test_a_policy_conflicted_at_one_target_still_applies_at_its_others() -> None:
    """Per target (docs/decisions.md): Conflicted at the Gateway, where the older one is, it
    still applies at the route, its other target, where nothing else is attached."""
    both_targets = f"""
apiVersion: gateway.nginx.org/v1alpha1
kind: ClientSettingsPolicy
metadata: {{name: wide, namespace: apps, creationTimestamp: "{NEWER}"}}
spec:
  targetRefs:
  - {{group: gateway.networking.k8s.io, kind: Gateway, name: gw, namespace: infra}}
  - {{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}}
  body: {{maxSize: 20m}}
  keepAlive: {{requests: 100}}
"""
    grant = reference_grant(
        "infra",
        from_kind="ClientSettingsPolicy",
        from_group="gateway.nginx.org",
        from_ns="apps",
        to_kind="Gateway",
    )
    view = store(grant, client("older", "body: {maxSize: 10m}", OLDER), both_targets)
    assert only(view, route("apps", "r"), "ClientSettingsPolicy") == {
        "body": {"maxSize": "20m"},
        "keepAlive": {"requests": 100},
    }
    assert losers(view, route("apps", "r"), "ClientSettingsPolicy") == [
        (
            "apps/wide",
            "*",
            "conflicted: infra/older also sets body.maxSize and comes first (older)",
        ),
        ("infra/older", "body.maxSize", "apps/wide is more specific (default at HTTPRoute/apps/r)"),
    ]


def c04(view: Store, text: str) -> list[str]:
    return [
        j.finding.message for j in verdict_of(view, text).judged if j.finding.rule_id == "PA-C04"
    ]


def test_the_impact_preview_of_a_policy_conflicted_on_arrival_changes_nothing() -> None:
    """SPEC PA-C04 by the vendor's rule: field by field its keepAlive would be a change."""
    view = store(client("older", "body: {maxSize: 10m}", OLDER))
    assert (
        c04(view, client("newer", "body: {maxSize: 20m}\nkeepAlive: {requests: 100}", NEWER)) == []
    )


def test_the_impact_preview_of_a_policy_that_merges_shows_its_own_fields_only() -> None:
    """Older, it would win whole by SPEC §5.1 and take the other one's fields away."""
    view = store(upstream("later", "zoneSize: 2m", NEWER))
    assert c04(view, upstream("earlier", "keepAlive: {connections: 8}", OLDER)) == [
        "changes keepAlive.connections on 1 Service (apps/foo unset→8)"
    ]


def test_the_impact_preview_shows_what_a_policy_takes_from_one_it_makes_conflicted() -> None:
    """Here SPEC's rule and the vendor's agree (the older one alone applies); pinned so the
    preview keeps saying what the Conflicted one loses."""
    view = store(upstream("later", "zoneSize: 2m\nloadBalancingMethod: random", NEWER))
    assert c04(view, upstream("earlier", "zoneSize: 1m", OLDER)) == [
        "changes loadBalancingMethod on 1 Service (apps/foo random→unset)",
        "changes zoneSize on 1 Service (apps/foo 2m→1m)",
    ]


# --- the same properties as every kind (SPEC §5.8): cached and reviewed answers stay fresh ----

NGINX_UPSERT = st.tuples(st.just("upsert"), changes.nginx_policy_docs())
NGINX_DELETE = st.tuples(
    st.just("delete"),
    st.builds(
        lambda kind, ns, name: ObjectKey(changes.NGINX_GROUP, kind, ns, name),
        st.sampled_from(sorted(changes.NGINX_KINDS)),
        st.sampled_from(["infra", "apps", "shop"]),
        st.sampled_from(["n0", "n1", "n2"]),
    ),
)
# Several of its policies from the start, so that some share a target; then changes of any
# kind, its own more often than the mix of `changes.OPS` would draw them.
NGINX_STARTS = st.tuples(
    st.lists(NGINX_UPSERT, min_size=2, max_size=5), st.lists(changes.OPS, max_size=3)
).map(lambda parts: parts[0] + parts[1])
NGINX_CHANGES = st.lists(st.one_of(NGINX_UPSERT, NGINX_DELETE, changes.OPS), min_size=1, max_size=6)


@whole_clusters(100)
@given(start=NGINX_STARTS, ops=NGINX_CHANGES)
def test_cached_values_with_the_vendor_rule_always_equal_a_fresh_computation(
    start: list[changes.Op], ops: list[changes.Op]
) -> None:
    """A write can make a policy Conflicted, or free it, on the objects below its targets."""
    view = changes.base_store()
    for op in start:
        changes.apply(view, op)
    cache = SummaryCache(view, changes.SETTINGS)
    keys = changes.annotated(view)
    changes.assert_fresh(cache, view, keys)
    for op in ops:
        changes.apply(view, op)
        keys = sorted({*keys, *changes.annotated(view)})
        changes.assert_fresh(cache, view, keys)


@whole_clusters(100)
@given(start=NGINX_STARTS, change=st.one_of(NGINX_UPSERT, NGINX_DELETE))
def test_a_reviewed_policy_of_the_vendor_is_computed_as_the_changed_cluster_would(
    start: list[changes.Op], change: changes.Op
) -> None:
    """The impact preview's "after" (an overlay on the store's warm memos, all its objects
    answered at once as the preview asks) against a store that holds the change for real:
    the rule reads only the policies at one target."""
    view = changes.base_store()
    for op in start:
        changes.apply(view, op)
    keys = changes.annotated(view)
    for key in keys:  # warm every memo of the store
        summary.summarize(key, view, changes.SETTINGS)
    after = changes.rebuilt(view)
    changes.apply(after, change)
    what, arg = change
    overlay = (
        OverlayView(view, upserts=[arg]) if what == "upsert" else OverlayView(view, deletes=[arg])
    )
    for key in keys:
        assert effective.compute(key, overlay) == effective.compute(key, after), key
        assert summary.summarize(key, overlay, changes.SETTINGS) == summary.summarize(
            key, after, changes.SETTINGS
        ), key
    for gk in (GroupKind(changes.NGINX_GROUP, kind) for kind in sorted(changes.NGINX_KINDS)):
        fresh = {key: next(iter(effective.compute(key, after, only=gk)), None) for key in keys}
        assert effective.compute_kind(keys, overlay, gk) == fresh, gk
