"""Every precedence rule of SPEC §4.4, §4.5 and §5, one table row each.

The cluster is `tests.fixtures.engine.CLUSTER`: GatewayClass acme → Gateway infra/gw (listeners http,
https) → HTTPRoute apps/r on `https` → Services apps/foo (port 80 named http) and apps/bar.
Each row adds policies written as a user writes them and states the route's effective value.
"""

from __future__ import annotations

import pytest

from tests.fixtures.engine import (
    CLUSTER,
    CRDS,
    by_path,
    config_of,
    docs,
    gateway,
    only,
    policy,
    reference_grant,
    result_of,
    route,
    service,
    store_of,
)
from webhook.core.engine import effective
from webhook.core.model.profiles import OperatorConfig
from webhook.core.model.refs import GroupKind, ObjectKey
from webhook.core.state.overlay import OverlayView

T0, T1 = "2024-05-01T10:00:00Z", "2024-05-01T10:00:01Z"


def route_value(
    *policies: str, kind: str = "RetryPolicy", config: OperatorConfig | None = None
) -> object:
    store = store_of(CRDS, CLUSTER, *(f"---\n{p}" for p in policies), config=config)
    found = by_path(store, route("apps", "r"), kind)
    return next(iter(found.values())) if found else None


PATCH_RULES = [
    pytest.param(
        [
            policy("a", "Gateway/gw", "override: {maxRetries: 1}"),
            policy("b", "HTTPRoute/r", "default: {maxRetries: 2}"),
        ],
        {"maxRetries": 1},
        id="override_on_gateway_beats_default_on_route",
    ),
    pytest.param(
        [
            policy("a", "Gateway/gw", "default: {maxRetries: 1}"),
            policy("b", "HTTPRoute/r", "override: {maxRetries: 2}"),
        ],
        {"maxRetries": 2},
        id="override_on_route_beats_default_on_gateway",
    ),
    pytest.param(
        [
            policy("a", "Gateway/gw", "default: {maxRetries: 1}"),
            policy("b", "Gateway/gw", "override: {maxRetries: 2}"),
        ],
        {"maxRetries": 2},
        id="override_beats_default_on_the_same_object",
    ),
    pytest.param(
        [
            policy("a", "HTTPRoute/r", "override: {maxRetries: 1}"),
            policy("b", "GatewayClass/acme", "default: {maxRetries: 2}"),
        ],
        {"maxRetries": 1},
        id="an_override_beats_a_default_whatever_their_levels",
    ),
    pytest.param(
        [
            policy("a", "Gateway/gw", "override: {maxRetries: 1}"),
            policy("b", "HTTPRoute/r", "override: {maxRetries: 2}"),
        ],
        {"maxRetries": 1},
        id="less_specific_override_beats_more_specific_override",
    ),
    pytest.param(
        [
            policy("a", "GatewayClass/acme", "override: {maxRetries: 1}"),
            policy("b", "Gateway/gw", "override: {maxRetries: 2}"),
        ],
        {"maxRetries": 1},
        id="class_override_beats_gateway_override",
    ),
    pytest.param(
        [
            policy("a", "Gateway/gw", "default: {maxRetries: 1}"),
            policy("b", "HTTPRoute/r", "default: {maxRetries: 2}"),
        ],
        {"maxRetries": 2},
        id="more_specific_default_beats_less_specific_default",
    ),
    pytest.param(
        [
            policy("a", "Gateway/gw", "default: {maxRetries: 1}", created=T1),
            policy("b", "Gateway/gw", "default: {maxRetries: 2}", created=T0),
        ],
        {"maxRetries": 2},
        id="on_one_level_the_older_default_wins",
    ),
    pytest.param(
        [
            policy("a", "Gateway/gw", "override: {maxRetries: 1}", created=T1),
            policy("b", "Gateway/gw", "override: {maxRetries: 2}", created=T0),
        ],
        {"maxRetries": 2},
        id="on_one_level_the_older_override_wins",
    ),
    pytest.param(
        [
            policy("b", "Gateway/gw", "default: {maxRetries: 2}", created=T0),
            policy("a", "Gateway/gw", "default: {maxRetries: 1}", created=T0),
        ],
        {"maxRetries": 1},
        id="same_timestamp_the_name_first_in_byte_order_wins",
    ),
    pytest.param(
        [
            policy("b", "Gateway/gw", "default: {maxRetries: 2}"),
            policy("a", "Gateway/gw", "default: {maxRetries: 1}"),
        ],
        {"maxRetries": 1},
        id="without_timestamps_the_name_decides",
    ),
    pytest.param(
        [
            policy("a", "Gateway/gw", "default: {maxRetries: 1}", created=T0),
            policy("b", "Gateway/gw", "default: {maxRetries: 2, retryOn: ['503']}", created=T1),
        ],
        {"maxRetries": 1, "retryOn": ["503"]},
        id="a_tie_is_decided_field_by_field",
    ),
    pytest.param(
        [
            policy("a", "Gateway/gw", "default: {maxRetries: 1}"),
            policy("b", "Gateway/gw#https", "default: {maxRetries: 2}"),
        ],
        {"maxRetries": 2},
        id="listener_default_beats_gateway_default",
    ),
    pytest.param(
        [
            policy("a", "Gateway/gw", "override: {maxRetries: 1}"),
            policy("b", "Gateway/gw#https", "override: {maxRetries: 2}"),
        ],
        {"maxRetries": 1},
        id="gateway_override_beats_listener_override",
    ),
    pytest.param(
        [policy("a", "Gateway/gw#http", "default: {maxRetries: 1}")],
        None,
        id="a_policy_on_another_listener_does_not_reach_the_route",
    ),
    pytest.param(
        [
            policy("a", "Namespace/apps", "default: {maxRetries: 1}"),
            policy("b", "Gateway/gw", "default: {maxRetries: 2}"),
        ],
        {"maxRetries": 1},
        id="route_namespace_default_beats_gateway_default",
    ),
    pytest.param(
        [
            policy("a", "Namespace/infra", "default: {maxRetries: 1}"),
            policy("b", "Gateway/gw", "default: {maxRetries: 2}"),
        ],
        {"maxRetries": 2},
        id="gateway_default_beats_gateway_namespace_default",
    ),
    pytest.param(
        [
            policy("a", "Namespace/infra", "override: {maxRetries: 1}"),
            policy("b", "Gateway/gw", "override: {maxRetries: 2}"),
        ],
        {"maxRetries": 1},
        id="gateway_namespace_override_beats_gateway_override",
    ),
    pytest.param(
        [
            policy("a", "Namespace/apps", "override: {maxRetries: 1}"),
            policy("b", "Gateway/gw", "override: {maxRetries: 2}"),
        ],
        {"maxRetries": 2},
        id="gateway_override_beats_route_namespace_override",
    ),
    pytest.param(
        [
            policy("a", "Gateway/gw", "default: {retryOn: ['501', '502']}"),
            policy("b", "HTTPRoute/r", "default: {retryOn: ['504']}"),
        ],
        {"retryOn": ["504"]},
        id="lists_are_replaced_never_unioned",
    ),
    pytest.param(
        [
            policy("a", "Gateway/gw", "default: {headers: {x: '1', y: '2'}}"),
            policy("b", "HTTPRoute/r", "default: {headers: {z: '3'}}"),
        ],
        {"headers": {"z": "3"}},
        id="maps_are_replaced_whole",
    ),
    pytest.param(
        [
            policy("a", "Gateway/gw", "default: {backoff: {baseInterval: 1s, maxInterval: 10s}}"),
            policy("b", "HTTPRoute/r", "default: {backoff: {maxInterval: 5s}}"),
        ],
        {"backoff": {"baseInterval": "1s", "maxInterval": "5s"}},
        id="nested_objects_merge_field_by_field",
    ),
    pytest.param(
        [
            policy(
                "a",
                "Gateway/gw",
                "default: {perStatus: [{code: 503, maxRetries: 3, backoff: 1s}, {code: 502, maxRetries: 1}]}",
            ),
            policy("b", "HTTPRoute/r", "default: {perStatus: [{code: 503, maxRetries: 5}]}"),
        ],
        {
            "perStatus": [
                {"code": 502, "maxRetries": 1},
                {"code": 503, "maxRetries": 5, "backoff": "1s"},
            ]
        },
        id="list_map_items_merge_on_their_keys_field_by_field",
    ),
    pytest.param(
        [policy("a", "Gateway/gw", "default: {perStatus: [{code: 504}]}")],
        {"perStatus": [{"code": 504}]},
        id="a_list_map_item_with_only_its_key_is_kept",
    ),
    pytest.param(
        [
            policy("a", "Gateway/gw", "default: {maxRetries: 3}"),
            policy("b", "HTTPRoute/r", "default: {maxRetries: 0}"),
        ],
        {"maxRetries": 0},
        id="zero_is_a_value",
    ),
    pytest.param(
        [
            policy("a", "Gateway/gw", "default: {enabled: true}"),
            policy("b", "HTTPRoute/r", "default: {enabled: false}"),
        ],
        {"enabled": False},
        id="false_is_a_value",
    ),
    pytest.param(
        [
            policy(
                "a",
                "Gateway/gw",
                "default: {maxRetries: 3, retryOn: ['5xx'], headers: {x: y}, backoff: {baseInterval: 1s}}",
            ),
            policy(
                "b",
                "HTTPRoute/r",
                "default: {maxRetries: null, retryOn: [], headers: {}, backoff: {baseInterval: ''}}",
            ),
        ],
        {
            "maxRetries": 3,
            "retryOn": ["5xx"],
            "headers": {"x": "y"},
            "backoff": {"baseInterval": "1s"},
        },
        id="null_empty_string_empty_list_and_empty_map_are_unset",
    ),
    pytest.param(
        [policy("a", "HTTPRoute/r", "maxRetries: 4")],
        {"maxRetries": 4},
        id="spec_proper_without_wrappers_is_a_default",
    ),
]


@pytest.mark.parametrize(("policies", "expected"), PATCH_RULES)
def test_patch_precedence(policies: list[str], expected: object) -> None:
    assert route_value(*policies) == expected


ATOMIC = config_of("kinds: [{group: policies.example.com, kind: RetryPolicy, merge: atomic}]")

ATOMIC_RULES = [
    pytest.param(
        [
            policy("a", "Gateway/gw", "override: {maxRetries: 1}"),
            policy("b", "HTTPRoute/r", "default: {retryOn: ['504']}"),
        ],
        {"maxRetries": 1},
        {"maxRetries": 1, "retryOn": ["504"]},
        id="the_winning_override_replaces_everything",
    ),
    pytest.param(
        [
            policy("a", "Gateway/gw", "default: {maxRetries: 1, retryOn: ['501']}"),
            policy("b", "HTTPRoute/r", "default: {retryOn: ['504']}"),
        ],
        {"retryOn": ["504"]},
        {"maxRetries": 1, "retryOn": ["504"]},
        id="else_the_most_specific_default_wins_whole",
    ),
    pytest.param(
        [
            policy("a", "GatewayClass/acme", "override: {maxRetries: 1}"),
            policy("b", "Gateway/gw", "override: {retryOn: ['502']}"),
        ],
        {"maxRetries": 1},
        {"maxRetries": 1, "retryOn": ["502"]},
        id="the_first_override_from_the_root_wins",
    ),
    pytest.param(
        [
            policy("a", "Gateway/gw", "default: {backoff: {baseInterval: 1s, maxInterval: 9s}}"),
            policy("b", "HTTPRoute/r", "default: {backoff: {maxInterval: 5s}}"),
        ],
        {"backoff": {"maxInterval": "5s"}},
        {"backoff": {"baseInterval": "1s", "maxInterval": "5s"}},
        id="nested_objects_are_not_merged",
    ),
]


@pytest.mark.parametrize(("policies", "atomic", "patch"), ATOMIC_RULES)
def test_atomic_versus_patch(policies: list[str], atomic: object, patch: object) -> None:
    assert route_value(*policies, config=ATOMIC) == atomic
    assert route_value(*policies) == patch


# --- Direct kinds (SPEC §4.5, §5.1) -----------------------------------------------------------


def direct(name: str, target: str, body: str, created: str | None = None) -> str:
    return policy(name, target, body, kind="HealthCheckPolicy", created=created)


def test_direct_policy_on_a_gateway_is_not_inherited_by_its_routes() -> None:
    store = store_of(CRDS, CLUSTER, direct("hc", "Gateway/gw", "path: /healthz"))
    assert result_of(store, route("apps", "r"), "HealthCheckPolicy") is None
    assert only(store, gateway("infra", "gw"), "HealthCheckPolicy") == {"path": "/healthz"}


def test_direct_sectionless_policy_applies_to_the_object_and_sections_without_their_own() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        direct("all", "Gateway/gw", "path: /all"),
        "---\n" + direct("tls", "Gateway/gw#https", "path: /tls"),
    )
    assert by_path(store, gateway("infra", "gw"), "HealthCheckPolicy") == {
        ("Gateway/infra/gw",): {"path": "/all"},
        ("Gateway/infra/gw#https",): {"path": "/tls"},
    }
    result = result_of(store, gateway("infra", "gw"), "HealthCheckPolicy")
    assert result is not None
    assert all(not c.losers for c in result.contexts)  # both accepted: no conflict


def test_direct_two_policies_on_one_section_conflict_and_the_older_wins() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        direct("late", "Service/foo#http", "path: /late", created=T1),
        "---\n" + direct("early", "Service/foo#http", "path: /early", created=T0),
    )
    found = by_path(store, service("apps", "foo"), "HealthCheckPolicy")
    assert found[("Service/apps/foo#http",)] == {"path": "/early"}
    result = result_of(store, service("apps", "foo"), "HealthCheckPolicy")
    assert result is not None
    (section,) = [c for c in result.contexts if c.path == ("Service/apps/foo#http",)]
    assert [(x.policy, x.reason) for x in section.losers] == [
        ("apps/late", "conflicted: apps/early wins (older)")
    ]


def test_direct_policy_on_an_unattached_route_still_applies() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        """
        apiVersion: gateway.networking.k8s.io/v1
        kind: HTTPRoute
        metadata: {name: lonely, namespace: apps}
        spec: {parentRefs: [{name: nowhere}]}
        """,
        "---\n" + direct("hc", "HTTPRoute/lonely", "path: /x"),
    )
    assert only(store, route("apps", "lonely"), "HealthCheckPolicy") == {"path": "/x"}


# --- fieldMap (SPEC §5.9) ---------------------------------------------------------------------

FIELD_MAP = config_of(
    """
    kinds:
    - group: policies.example.com
      kind: TimeoutPolicy
      fieldMap: {/timeout: /spec/rules/0/timeouts/request}
    """
)
ROUTE_WITH_TIMEOUT = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: apps}
spec:
  parentRefs: [{name: gw, namespace: infra, sectionName: https}]
  rules: [{timeouts: {request: 5s}, backendRefs: [{name: foo, port: 80}]}]
"""


@pytest.mark.parametrize(
    ("policies", "route_has_timeout", "expected", "stanza"),
    [
        pytest.param(
            [policy("d", "HTTPRoute/r", "default: {timeout: 10s}", kind="TimeoutPolicy")],
            True,
            "5s",
            "object",
            id="the_objects_own_value_beats_defaults",
        ),
        pytest.param(
            [policy("o", "Gateway/gw", "override: {timeout: 1s}", kind="TimeoutPolicy")],
            True,
            "1s",
            "override",
            id="an_override_beats_the_objects_own_value",
        ),
        pytest.param(
            [policy("d", "Gateway/gw", "default: {timeout: 20s}", kind="TimeoutPolicy")],
            False,
            "20s",
            "default",
            id="without_an_own_value_the_default_applies",
        ),
    ],
)
def test_field_map(
    policies: list[str], route_has_timeout: bool, expected: str, stanza: str
) -> None:
    texts = [CRDS, CLUSTER, *(f"---\n{p}" for p in policies)]
    if route_has_timeout:
        texts.append(ROUTE_WITH_TIMEOUT)
    store = store_of(*texts, config=FIELD_MAP)
    result = result_of(store, route("apps", "r"), "TimeoutPolicy")
    assert result is not None
    (ctx,) = result.contexts
    assert ctx.effective == {"timeout": expected}
    assert ctx.sources["/timeout"].stanza == stanza
    if stanza == "object":
        assert ctx.sources["/timeout"].policy is None
        assert ctx.sources["/timeout"].at == "HTTPRoute/apps/r"


@pytest.mark.parametrize("first", ["r", "plain"])
def test_objects_answered_together_keep_their_own_values(first: str) -> None:
    """`compute_kind` answers the objects of an impact preview together: each by its own
    values (SPEC §5.9), as `compute` does, whichever object it answered before it."""
    plain = ROUTE_WITH_TIMEOUT.replace("name: r,", "name: plain,").replace(
        "timeouts: {request: 5s}, ", ""
    )
    gateway_default = policy("d", "Gateway/gw", "default: {timeout: 20s}", kind="TimeoutPolicy")
    store = store_of(
        CRDS, CLUSTER, f"---\n{gateway_default}", ROUTE_WITH_TIMEOUT, plain, config=FIELD_MAP
    )
    keys = [route("apps", first), route("apps", "plain" if first == "r" else "r")]
    found = effective.compute_kind(keys, store, GroupKind("policies.example.com", "TimeoutPolicy"))
    for key, expected in ((route("apps", "r"), "5s"), (route("apps", "plain"), "20s")):
        result = found[key]
        assert result is not None
        assert [ctx.effective for ctx in result.contexts] == [{"timeout": expected}], key
        assert result == result_of(store, key, "TimeoutPolicy"), key


# --- who may attach where -------------------------------------------------------------------

GRANT = reference_grant(
    "infra",
    from_kind="RetryPolicy",
    from_group="policies.example.com",
    from_ns="apps",
    to_kind="Gateway",
)


def test_a_cross_namespace_target_counts_only_with_a_reference_grant() -> None:
    foreign = policy("a", "Gateway/infra/gw", "default: {maxRetries: 7}", ns="apps")
    assert route_value(foreign) is None
    assert route_value(foreign, GRANT) == {"maxRetries": 7}


def test_a_namespace_target_counts_only_for_the_policys_own_namespace() -> None:
    assert (
        route_value(policy("a", "Namespace/apps", "default: {maxRetries: 7}", ns="infra")) is None
    )


# --- provenance and losers (SPEC §5.6, explain) -----------------------------------------------


def test_every_leaf_has_a_source_and_every_loser_a_reason() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        "---\n".join(
            [
                policy("class", "GatewayClass/acme", "override: {maxRetries: 1}"),
                policy(
                    "zz",
                    "Gateway/gw",
                    "override: {maxRetries: 2}\ndefault: {retryOn: ['501']}",
                    created=T0,
                ),
                policy("aa", "Gateway/gw", "default: {retryOn: ['502']}", created=T0),
                policy("old", "Gateway/gw", "default: {backoff: {baseInterval: 1s}}", created=T0),
                policy("new", "Gateway/gw", "default: {backoff: {baseInterval: 2s}}", created=T1),
                policy("route", "HTTPRoute/r", "default: {retryOn: ['504'], maxRetries: 9}"),
            ]
        ),
    )
    result = result_of(store, route("apps", "r"), "RetryPolicy")
    assert result is not None
    (ctx,) = result.contexts
    assert ctx.effective == {"maxRetries": 1, "retryOn": ["504"], "backoff": {"baseInterval": "1s"}}
    assert {p: (s.policy, s.stanza, s.at) for p, s in ctx.sources.items()} == {
        "/maxRetries": ("infra/class", "override", "GatewayClass/acme"),
        "/retryOn": ("apps/route", "default", "HTTPRoute/apps/r"),
        "/backoff/baseInterval": ("infra/old", "default", "Gateway/infra/gw"),
    }
    assert {(x.policy, x.stanza, x.field, x.reason) for x in ctx.losers} == {
        (
            "infra/zz",
            "override",
            "maxRetries",
            "overridden by infra/class (less specific override, at GatewayClass/acme)",
        ),
        (
            "infra/zz",
            "default",
            "retryOn",
            "apps/route is more specific (default at HTTPRoute/apps/r)",
        ),
        (
            "infra/aa",
            "default",
            "retryOn",
            "apps/route is more specific (default at HTTPRoute/apps/r)",
        ),
        ("infra/new", "default", "backoff.baseInterval", "lost tie-break to infra/old (older)"),
        ("apps/route", "default", "maxRetries", "overridden by infra/class"),
    }
    assert result.policies == (
        "apps/route",
        "infra/aa",
        "infra/class",
        "infra/new",
        "infra/old",
        "infra/zz",
    )


def test_a_tie_on_equal_timestamps_is_reported_as_alphabetical() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        policy("b", "Gateway/gw", "default: {maxRetries: 2}", created=T0),
        "---\n" + policy("a", "Gateway/gw", "default: {maxRetries: 1}", created=T0),
    )
    result = result_of(store, route("apps", "r"), "RetryPolicy")
    assert result is not None
    assert [x.reason for x in result.contexts[0].losers] == [
        "lost tie-break to infra/a (same age, alphabetical)"
    ]


def test_kinds_never_interact() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        policy("o", "Gateway/gw", "override: {timeout: 1s}", kind="TimeoutPolicy"),
        "---\n" + policy("d", "HTTPRoute/r", "default: {timeout: 9s}", kind="ColorPolicy"),
    )
    assert only(store, route("apps", "r"), "TimeoutPolicy") == {"timeout": "1s"}
    assert only(store, route("apps", "r"), "ColorPolicy") == {"timeout": "9s"}


SAME_NAMESPACE_ROUTE = """
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: local, namespace: infra}
spec:
  parentRefs: [{name: gw, sectionName: http}]
"""


@pytest.mark.parametrize(
    ("namespace_stanza", "gateway_stanza", "expected"),
    [
        pytest.param("default", "default", 1, id="as_a_default_it_counts_just_above_the_route"),
        pytest.param("override", "override", 1, id="as_an_override_it_counts_above_the_gateway"),
    ],
)
def test_a_namespace_shared_by_gateway_and_route_counts_at_its_strongest_rung(
    namespace_stanza: str, gateway_stanza: str, expected: int
) -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        SAME_NAMESPACE_ROUTE,
        "---\n" + policy("ns", "Namespace/infra", f"{namespace_stanza}: {{maxRetries: 1}}"),
        "---\n" + policy("gw", "Gateway/gw", f"{gateway_stanza}: {{maxRetries: 2}}"),
    )
    assert only(store, route("infra", "local"), "RetryPolicy") == {"maxRetries": expected}


def test_an_overlay_previews_a_policy_change_without_touching_the_store() -> None:
    store = store_of(CRDS, CLUSTER, policy("gw", "Gateway/gw", "default: {maxRetries: 2}"))
    (added,) = docs(policy("r", "HTTPRoute/r", "override: {maxRetries: 5}"))
    (changed,) = docs(policy("gw", "Gateway/gw", "default: {maxRetries: 3}"))
    r = route("apps", "r")
    assert only(OverlayView(store, upserts=[added]), r, "RetryPolicy") == {"maxRetries": 5}
    assert only(OverlayView(store, upserts=[changed]), r, "RetryPolicy") == {"maxRetries": 3}
    gone = OverlayView(
        store, deletes=[ObjectKey("policies.example.com", "RetryPolicy", "infra", "gw")]
    )
    assert result_of(gone, r, "RetryPolicy") is None
    assert [p.ref for p in gone.policies()] == []
    assert only(store, r, "RetryPolicy") == {"maxRetries": 2}
