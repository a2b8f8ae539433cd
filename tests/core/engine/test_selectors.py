"""SPEC §1.7 in the engine: `targetSelectors` as targets, and merge selectors (`strategy`,
`mergeType`) deciding how stanzas meet — never shown or merged as settings.

The cluster is `tests.fixtures.engine.CLUSTER` (GatewayClass acme → Gateway infra/gw → HTTPRoute
apps/r on `https` → Services apps/foo and apps/bar), plus labelled routes where a test needs
them.
"""

from __future__ import annotations

import textwrap

import pytest

from tests.fixtures.engine import (
    CLUSTER,
    CRDS,
    by_path,
    docs,
    gateway,
    policy,
    route,
    service,
    store_of,
    verdict_of,
)
from tests.fixtures.paths import REALWORLD
from webhook.core.admission import mutation
from webhook.core.admission import validation as admission
from webhook.core.admission.reviews import Request
from webhook.core.annotation import dependencies, summary
from webhook.core.engine import effective
from webhook.core.model.refs import ObjectKey
from webhook.core.model.settings import Settings
from webhook.core.state.overlay import OverlayView
from webhook.core.state.store import Store

T0, T1 = "2024-05-01T10:00:00Z", "2024-05-01T10:00:01Z"


def labelled_route(name: str, labels: dict[str, str]) -> str:
    return f"""
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: apps, labels: {labels}}}
spec:
  parentRefs: [{{name: gw, namespace: infra, sectionName: https}}]
  rules: [{{backendRefs: [{{name: foo, port: 80}}]}}]
"""


def selecting(name: str, labels: str, body: str, *, ns: str = "apps") -> str:
    return f"""
---
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {{name: {name}, namespace: {ns}, creationTimestamp: '{T0}'}}
spec:
  targetSelectors: [{{kind: HTTPRoute, matchLabels: {labels}}}]
{textwrap.indent(textwrap.dedent(body).strip(), "  ")}
"""


def retry_value(store: Store, key: ObjectKey) -> object:
    found = by_path(store, key, "RetryPolicy")
    return next(iter(found.values())) if found else None


# --- targetSelectors ---------------------------------------------------------------------------


def test_a_selector_attaches_the_policy_to_every_matching_route_of_its_namespace() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        labelled_route("shop", {"app": "shop"}),
        labelled_route("blog", {"app": "blog"}),
        selecting("p", "{app: shop}", "default: {maxRetries: 2}"),
    )
    assert retry_value(store, route("apps", "shop")) == {"maxRetries": 2}
    assert retry_value(store, route("apps", "blog")) is None
    assert retry_value(store, route("apps", "r")) is None  # unlabelled


def test_what_a_selector_reaches_is_inherited_below_the_route() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        labelled_route("shop", {"app": "shop"}),
        selecting("p", "{app: shop}", "default: {maxRetries: 2}"),
    )
    found = by_path(store, service("apps", "foo"), "RetryPolicy")
    via_shop = ("GatewayClass/acme", "Gateway/infra/gw#https", "HTTPRoute/apps/shop")
    assert found[(*via_shop, "Service/apps/foo#http")] == {"maxRetries": 2}
    via_r = ("GatewayClass/acme", "Gateway/infra/gw#https", "HTTPRoute/apps/r")
    assert found[(*via_r, "Service/apps/foo#http")] == {}  # that route is not selected


def test_a_selector_never_reaches_another_namespace() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        labelled_route("shop", {"app": "shop"}),
        selecting("p", "{app: shop}", "default: {maxRetries: 2}", ns="infra"),
    )
    assert retry_value(store, route("apps", "shop")) is None


def test_relabelling_a_route_moves_the_policy_with_the_label() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        labelled_route("shop", {"app": "blog"}),
        selecting("p", "{app: shop}", "default: {maxRetries: 2}"),
    )
    key = route("apps", "shop")
    assert retry_value(store, key) is None
    (relabelled,) = docs(labelled_route("shop", {"app": "shop"}))
    before = OverlayView(store, upserts=[store.get(key) or {}])
    old = store.get(key)
    store.upsert(relabelled)
    assert retry_value(store, key) == {"maxRetries": 2}
    affected = dependencies.affected_by_change(key, old, relabelled, before=before, after=store)
    assert {key, service("apps", "foo")} <= affected


def test_match_expressions_select_too() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        labelled_route("shop", {"tier": "gold"}),
        """
---
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {name: p, namespace: apps}
spec:
  targetSelectors:
  - kind: HTTPRoute
    matchExpressions: [{key: tier, operator: In, values: [gold, silver]}]
  default: {maxRetries: 5}
""",
    )
    assert retry_value(store, route("apps", "shop")) == {"maxRetries": 5}
    assert retry_value(store, route("apps", "r")) is None


def mutate_review(obj: dict[str, object]) -> Request:
    return Request(
        uid="u",
        kind={"group": "gateway.networking.k8s.io", "version": "v1", "kind": "HTTPRoute"},
        resource={"group": "gateway.networking.k8s.io", "version": "v1", "resource": "httproutes"},
        operation="UPDATE",
        name="shop",
        namespace="apps",
        object=obj,
    )


def test_a_route_submitted_with_a_new_label_is_annotated_for_its_new_label() -> None:
    """SPEC §3.1: the annotation is computed from the object as submitted, labels included."""
    store = store_of(
        CRDS,
        CLUSTER,
        labelled_route("shop", {"app": "blog"}),
        selecting("p", "{app: shop}", "default: {maxRetries: 2}"),
    )
    (submitted,) = docs(labelled_route("shop", {"app": "shop"}))
    ops = mutation.mutate(mutate_review(submitted), view=store, settings=Settings())
    (op,) = ops
    assert '"maxRetries":2' in str(op["value"])
    assert '"policies":["apps/p"]' in str(op["value"])
    stored = store.get(route("apps", "shop"))
    assert stored is not None and stored["metadata"]["labels"] == {"app": "blog"}  # untouched


def test_the_impact_preview_names_the_selected_routes() -> None:
    store = store_of(CRDS, CLUSTER, labelled_route("shop", {"app": "shop"}))
    (policy,) = docs(selecting("p", "{app: shop}", "default: {maxRetries: 2}"))
    verdict = admission.check_policy(
        policy, ObjectKey("policies.example.com", "RetryPolicy", "apps", "p").group_kind,
        view=store, settings=Settings(),
    )  # fmt: skip
    (line,) = verdict.warning_lines()
    assert line.startswith("[PA-C04] changes maxRetries on 1 HTTPRoute, 1 Service")
    assert "HTTPRoute/apps/shop" in line and "unset→2" in line


def test_two_selectors_picking_one_route_conflict_like_two_refs() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        labelled_route("shop", {"app": "shop"}),
        selecting("first", "{app: shop}", "default: {maxRetries: 2}"),
    )
    (second,) = docs(selecting("second", "{app: shop}", "default: {maxRetries: 3}"))
    second["metadata"]["creationTimestamp"] = T1
    gk = ObjectKey("policies.example.com", "RetryPolicy", "apps", "second").group_kind
    verdict = admission.check_policy(second, gk, view=store, settings=Settings())
    (line,) = [w for w in verdict.warning_lines() if w.startswith("[PA-C01]")]
    # A selector picked the target: the line names it (the field names the selector).
    assert line == (
        "[PA-C01] spec.targetSelectors[0]: first targets HTTPRoute/apps/shop too and wins on "
        "maxRetries"
    )


# --- merge selectors: `strategy` inside a stanza -----------------------------------------------


def retry(name: str, target: str, body: str) -> str:
    return "---\n" + policy(name, target, body, created=T0)


STRATEGY_RULES = [
    pytest.param(
        [
            retry("gw", "Gateway/gw", "default: {strategy: atomic, maxRetries: 1, retryOn: ['501']}"),
            retry("rt", "HTTPRoute/r", "default: {retryOn: ['504']}"),
        ],
        {"retryOn": ["504"]},
        id="an_atomic_default_is_skipped_where_something_more_specific_is_set",
    ),
    pytest.param(
        [retry("gw", "Gateway/gw", "default: {strategy: atomic, maxRetries: 1, retryOn: ['501']}")],
        {"maxRetries": 1, "retryOn": ["501"]},
        id="an_atomic_default_applies_whole_where_nothing_is_set",
    ),
    pytest.param(
        [
            retry("gw", "Gateway/gw", "default: {strategy: merge, maxRetries: 1, retryOn: ['501']}"),
            retry("rt", "HTTPRoute/r", "default: {strategy: atomic, retryOn: ['504']}"),
        ],
        {"maxRetries": 1, "retryOn": ["504"]},
        id="a_less_specific_merge_default_fills_what_an_atomic_one_left_unset",
    ),
    pytest.param(
        [
            retry("cls", "GatewayClass/acme", "default: {strategy: atomic, maxRetries: 9}"),
            retry("rt", "HTTPRoute/r", "default: {strategy: atomic, retryOn: ['504']}"),
        ],
        {"retryOn": ["504"]},
        id="a_less_specific_atomic_default_is_skipped_after_an_atomic_one_applied",
    ),
    pytest.param(
        [
            retry("gw", "Gateway/gw", "override: {strategy: atomic, maxRetries: 1}"),
            retry("rt", "HTTPRoute/r", "default: {retryOn: ['504']}\noverride: {backoff: {baseInterval: 1s}}"),
        ],
        {"maxRetries": 1},
        id="an_atomic_override_leaves_everything_more_specific_unset",
    ),
    pytest.param(
        [
            retry("cls", "GatewayClass/acme", "override: {strategy: merge, retryOn: ['500']}"),
            retry("gw", "Gateway/gw", "override: {strategy: atomic, maxRetries: 1, retryOn: ['501']}"),
            retry("rt", "HTTPRoute/r", "default: {backoff: {baseInterval: 1s}}"),
        ],
        {"maxRetries": 1, "retryOn": ["500"]},
        id="an_atomic_override_claims_what_less_specific_overrides_left",
    ),
    pytest.param(
        [
            retry("gw", "Gateway/gw", "override: {strategy: merge, maxRetries: 1}"),
            retry("rt", "HTTPRoute/r", "default: {maxRetries: 7, retryOn: ['504']}"),
        ],
        {"maxRetries": 1, "retryOn": ["504"]},
        id="a_merge_override_is_the_field_by_field_override_of_5_2",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("policies", "expected"), STRATEGY_RULES)
def test_stanza_strategy(policies: list[str], expected: object) -> None:
    store = store_of(CRDS, CLUSTER, *policies)
    assert retry_value(store, route("apps", "r")) == expected


def test_a_skipped_atomic_default_is_a_loser_named_with_why() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        retry("gw", "Gateway/gw", "default: {strategy: atomic, maxRetries: 1}"),
        retry("rt", "HTTPRoute/r", "default: {retryOn: ['504']}"),
    )
    (result,) = effective.compute(route("apps", "r"), store)
    (context,) = result.contexts
    (loser,) = context.losers
    assert (loser.policy, loser.field) == ("infra/gw", "*")
    assert "atomic: skipped whole" in loser.reason and loser.by is not None


def test_a_merge_selector_is_never_a_setting_in_the_annotation() -> None:
    store = store_of(
        CRDS, CLUSTER, retry("gw", "Gateway/gw", "default: {strategy: atomic, maxRetries: 1}")
    )
    value = summary.summarize(route("apps", "r"), store, Settings())
    assert value is not None and "strategy" not in value and '"/maxRetries"' in value


def test_a_setting_named_strategy_stays_a_setting_for_a_kind_without_the_selector() -> None:
    store = store_of(CRDS, CLUSTER, retry("gw", "Gateway/gw", "default: {strategy: RoundRobin}"))
    assert retry_value(store, gateway("infra", "gw")) == {"strategy": "RoundRobin"}


# --- catalog kinds: Envoy Gateway's `mergeType`, Kuadrant's atomic default ------------------

VENDOR_CRDS = REALWORLD / "crds"


def vendor_crds(name: str) -> str:
    return (VENDOR_CRDS / f"{name}.yaml").read_text(encoding="utf-8")


def btp(name: str, target: str, body: str) -> str:
    return "---\n" + policy(
        name,
        target,
        body,
        kind="BackendTrafficPolicy",
        api_version="gateway.envoyproxy.io/v1alpha1",
        created=T0,
    )


GATEWAY_BTP = btp(
    "gw", "Gateway/gw", "timeout: {http: {requestTimeout: 10s}}\nretry: {numRetries: 3}"
)


def with_route_policy(spec: str) -> Store:
    """Envoy Gateway's CRDs, the cluster, the Gateway's policy and a route policy of `spec`."""
    return store_of(
        vendor_crds("envoy-gateway"), CLUSTER, GATEWAY_BTP, btp("rt", "HTTPRoute/r", spec)
    )


def btp_value(store: Store) -> object:
    found = by_path(store, route("apps", "r"), "BackendTrafficPolicy")
    return next(iter(found.values())) if found else None


def findings_of(store: Store, text: str, created: str, rule: str) -> list[tuple[str, str]]:
    """(field, message) of each `rule` finding of `text`'s policy, created at `created`."""
    verdict = verdict_of(store, text, created=created)
    return [
        (j.finding.field, j.finding.message) for j in verdict.judged if j.finding.rule_id == rule
    ]


def test_envoy_gateway_the_more_specific_policy_replaces_the_gateways_whole() -> None:
    store = with_route_policy("retry: {numRetries: 5}")
    assert btp_value(store) == {"retry": {"numRetries": 5}}


def test_envoy_gateway_merge_type_merges_the_route_policy_onto_the_gateways() -> None:
    store = with_route_policy("mergeType: StrategicMerge\nretry: {numRetries: 5}")
    assert btp_value(store) == {
        "retry": {"numRetries": 5},
        "timeout": {"http": {"requestTimeout": "10s"}},
    }
    value = summary.summarize(route("apps", "r"), store, Settings())
    assert value is not None and "mergeType" not in value


def test_envoy_gateway_merge_type_on_the_less_specific_policy_changes_nothing() -> None:
    store = store_of(
        vendor_crds("envoy-gateway"),
        CLUSTER,
        btp(
            "gw", "Gateway/gw", "mergeType: StrategicMerge\ntimeout: {http: {requestTimeout: 10s}}"
        ),
        btp("rt", "HTTPRoute/r", "retry: {numRetries: 5}"),
    )
    assert btp_value(store) == {"retry": {"numRetries": 5}}


@pytest.mark.parametrize("body", ["", "timeout: {}"], ids=["nothing", "only-unset-values"])
def test_envoy_gateway_an_empty_route_policy_replaces_the_gateways_whole(body: str) -> None:
    """Envoy Gateway's translator (testdata backendtrafficpolicy-override-replace): a route's
    policy that sets nothing still replaces the Gateway's whole, so the route gets none of its
    settings; the Gateway's policy is a loser there, replaced by the empty one."""
    store = with_route_policy(body)
    assert btp_value(store) == {}
    (result,) = effective.compute(route("apps", "r"), store)
    assert result.policies == ("apps/rt", "infra/gw")
    (context,) = result.contexts
    (loser,) = context.losers
    assert (loser.policy, loser.field) == ("infra/gw", "*")
    assert loser.by is not None and loser.by.policy == "apps/rt"
    assert "atomic: skipped whole" in loser.reason
    # Where the empty policy is not the more specific one, it takes nothing away.
    above = store_of(
        vendor_crds("envoy-gateway"),
        CLUSTER,
        btp("gw", "Gateway/gw", body),
        btp("rt", "HTTPRoute/r", "retry: {numRetries: 5}"),
    )
    assert btp_value(above) == {"retry": {"numRetries": 5}}


def test_envoy_gateway_an_empty_route_policy_s_impact_preview_unsets_the_gateway_s_values() -> None:
    """PA-C04 (SPEC §2.3) shows what the empty policy does to its route: each of the Gateway
    policy's values goes to unset there."""
    store = store_of(vendor_crds("envoy-gateway"), CLUSTER, GATEWAY_BTP)
    lines = [
        message for _, message in findings_of(store, btp("rt", "HTTPRoute/r", ""), T1, "PA-C04")
    ]
    assert any(
        line.startswith("changes retry.numRetries on") and "r 3→unset" in line for line in lines
    ), lines
    assert any(
        line.startswith("changes timeout.http.requestTimeout on") and "10s→unset" in line
        for line in lines
    ), lines


def test_envoy_gateway_an_empty_route_policy_with_merge_type_changes_nothing() -> None:
    store = with_route_policy("mergeType: StrategicMerge")
    assert btp_value(store) == {
        "retry": {"numRetries": 3},
        "timeout": {"http": {"requestTimeout": "10s"}},
    }


def test_an_empty_explicit_atomic_stanza_is_unset_and_replaces_nothing() -> None:
    """SPEC §5.4: `default: {}` is unset. Only a policy whose settings are its spec proper
    (no wrapper at all, Envoy Gateway's shape) takes part when it sets nothing."""
    store = store_of(
        CRDS,
        CLUSTER,
        retry("gw", "Gateway/gw", "default: {strategy: atomic, maxRetries: 1}"),
        retry("rt", "HTTPRoute/r", "default: {strategy: atomic}"),
    )
    assert retry_value(store, route("apps", "r")) == {"maxRetries": 1}


def rlp(name: str, target: str, body: str) -> str:
    return "---\n" + policy(
        name,
        target,
        body,
        kind="RateLimitPolicy",
        api_version="kuadrant.io/v1",
        created=T0,
        single_ref=True,
    )


def rlp_value(store: Store) -> object:
    found = by_path(store, route("apps", "r"), "RateLimitPolicy")
    return next(iter(found.values())) if found else None


ROUTE_LIMITS = {"limits": {"route": {"rates": [{"limit": 5, "window": "1m"}]}}}


@pytest.mark.parametrize(
    ("gateway_stanza", "expected"),
    [
        ("defaults: {limits: {global: {rates: [{limit: 100, window: 1m}]}}}", ROUTE_LIMITS),
        (
            "defaults: {strategy: atomic, limits: {global: {rates: [{limit: 100, window: 1m}]}}}",
            ROUTE_LIMITS,
        ),
    ],
)
def test_kuadrant_defaults_are_atomic_unless_they_say_merge(
    gateway_stanza: str, expected: object
) -> None:
    store = store_of(
        vendor_crds("kuadrant"),
        CLUSTER,
        rlp("gw", "Gateway/gw", gateway_stanza),
        rlp("rt", "HTTPRoute/r", "limits: {route: {rates: [{limit: 5, window: 1m}]}}"),
    )
    assert rlp_value(store) == expected


def test_kuadrant_merge_defaults_fill_what_the_route_leaves() -> None:
    store = store_of(
        vendor_crds("kuadrant"),
        CLUSTER,
        rlp("gw", "Gateway/gw", "defaults: {strategy: merge, limits: {global: {rates: [{limit: 100, window: 1m}]}}}"),
        rlp("rt", "HTTPRoute/r", "limits: {route: {rates: [{limit: 5, window: 1m}]}}"),
    )  # fmt: skip
    value = rlp_value(store)
    assert isinstance(value, dict) and set(value["limits"]) == {"global", "route"}


# --- PA-C01 where stanzas meet atomically: the policy that loses applies nothing -----------------


def conflict_line(store: Store, text: str, created: str) -> str | None:
    """The PA-C01 warning of `text`'s policy, admitted as created at `created`, as a warning
    line (rule ID and field first), if any."""
    found = [
        f"[PA-C01] {where}: {message}"
        for where, message in findings_of(store, text, created, "PA-C01")
    ]
    assert len(found) <= 1, found
    return found[0] if found else None


T2 = "2024-05-01T10:00:02Z"


def test_envoy_gateway_a_second_policy_on_the_same_route_loses_whole_whatever_its_fields() -> None:
    """Envoy Gateway applies one BackendTrafficPolicy per target, the older: the newer sets
    other fields, but none of them applies. PA-C01 says so on both sides, where comparing the
    fields alone found no conflict."""
    older = btp("older", "HTTPRoute/r", "retry: {numRetries: 3}")
    newer = btp("newer", "HTTPRoute/r", "timeout: {http: {requestTimeout: 5s}}")
    store = store_of(vendor_crds("envoy-gateway"), CLUSTER, older)
    line = conflict_line(store, newer, T2)
    assert line == "[PA-C01] spec.targetRefs[0]: older targets it too and wins whole (atomic)"
    assert len(line) <= 120  # SPEC §2.5
    store = store_of(vendor_crds("envoy-gateway"), CLUSTER, newer.replace(T0, T2))
    line = conflict_line(store, older, T0)
    assert line == "[PA-C01] spec.targetRefs[0]: newer targets it too; this one wins whole (atomic)"
    # An empty older policy still wins, and the newer one applies nothing.
    store = store_of(vendor_crds("envoy-gateway"), CLUSTER, btp("older", "HTTPRoute/r", ""))
    line = conflict_line(store, newer, T2)
    assert line is not None and line.endswith("and wins whole (atomic)")


def test_kuadrant_an_override_at_the_same_rung_leaves_an_atomic_default_nothing() -> None:
    """Kuadrant's stanzas are atomic unless they say `strategy: merge` (docs/decisions.md): an
    atomic override leaves everything below it unset, and an atomic default applies only where
    nothing is claimed yet — so an override at the default's rung takes it whole, whatever
    their fields. Both stanzas merging, each keeps its own fields, and nothing conflicts."""
    override = rlp("o", "Gateway/gw", "overrides: {limits: {b: {rates: [{limit: 2, window: 1m}]}}}")
    store = store_of(vendor_crds("kuadrant"), CLUSTER, override)
    default = rlp("d", "Gateway/gw", "defaults: {limits: {a: {rates: [{limit: 1, window: 1m}]}}}")
    line = conflict_line(store, default, T2)
    assert line == "[PA-C01] spec.targetRef: o targets it too and wins whole (atomic)"
    merging = store_of(
        vendor_crds("kuadrant"),
        CLUSTER,
        override.replace("overrides: {", "overrides: {strategy: merge, "),
    )
    both = default.replace("defaults: {", "defaults: {strategy: merge, ")
    assert conflict_line(merging, both, T2) is None


def test_patch_kinds_still_conflict_on_the_fields_they_share_only() -> None:
    store = store_of(CRDS, CLUSTER, retry("older", "HTTPRoute/r", "default: {maxRetries: 2}"))
    newer = retry("newer", "HTTPRoute/r", "default: {maxRetries: 5, retryOn: ['503']}")
    line = conflict_line(store, newer, T2)
    assert line is not None and line.endswith("and wins on maxRetries")
    assert (
        conflict_line(store, retry("other", "HTTPRoute/r", "default: {retryOn: ['503']}"), T2)
        is None
    )


def test_kuadrant_a_default_an_atomic_override_replaces_is_named_where_it_is_written() -> None:
    """PA-C02 and PA-C03 name the stanza as the policy spells it: Kuadrant's `overrides`, and
    for limits in the spec proper (an implicit default) `spec` itself — not `spec.default.*`."""
    gateway_override = rlp(
        "gw", "Gateway/gw", "overrides: {limits: {global: {rates: [{limit: 100, window: 1m}]}}}"
    )
    route_limits = rlp("rt", "HTTPRoute/r", "limits: {route: {rates: [{limit: 5, window: 1m}]}}")
    store = store_of(vendor_crds("kuadrant"), CLUSTER, gateway_override)
    ((where, message),) = findings_of(store, route_limits, T2, "PA-C02")
    assert where == "spec" and "replaced whole by infra/gw's atomic override" in message
    assert len(f"[PA-C02] {where}: {message}") <= 120  # SPEC §2.5
    store = store_of(vendor_crds("kuadrant"), CLUSTER, route_limits)
    ((where, message),) = findings_of(store, gateway_override, T0, "PA-C03")
    assert where == "spec.overrides" and "apps/rt" in message
