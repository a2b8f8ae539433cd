"""Every rule of SPEC §2.1/§2.2 (and PA-K01, PA-S00): a case that fires it and a near miss.

Each case is a policy as a user writes it, admitted against the shared example cluster.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.paths import REALWORLD
from tests.fixtures.yaml_state import CLUSTER, POLICY_CRDS, config_of, one, store_of
from webhook.core.admission import validation as admission
from webhook.core.model import profiles
from webhook.core.model.policy import read_policy
from webhook.core.model.refs import GroupKind, key_of
from webhook.core.model.settings import Settings
from webhook.core.rules.findings import Verdict
from webhook.core.rules.ruletable import RULES
from webhook.core.state.store import Store


def admit(store: Store, text: str, settings: Settings | None = None) -> Verdict:
    obj = one(text)
    key = key_of(obj)
    assert key is not None
    return admission.check_policy(
        obj, GroupKind(key.group, key.kind), view=store, settings=settings or Settings()
    )


def fired(verdict: Verdict) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for judged in verdict.judged:
        out.setdefault(judged.finding.rule_id, []).append(judged.finding.field)
    return out


def retry(spec: str, namespace: str = "apps", name: str = "p") -> str:
    return f"""
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {{name: {name}, namespace: {namespace}}}
spec:
{spec}
"""


def health(spec: str) -> str:
    return f"""
apiVersion: policies.example.com/v1alpha1
kind: HealthCheckPolicy
metadata: {{name: h, namespace: apps}}
spec:
{spec}
"""


ROUTE = "  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: storefront}]\n"
SVC = "  targetRefs: [{group: '', kind: Service, name: foo}]\n"

# (rule, expected field, policy that fires it, near miss that must not)
CASES: list[tuple[str, str, str, str]] = [
    ("PA-S01", "spec.targetRef",
     retry("  targetRef: {group: gateway.networking.k8s.io, kind: HTTPRoute, name: storefront}\n" + ROUTE + "  default: {maxRetries: 1}"),
     retry("  targetRef: {group: gateway.networking.k8s.io, kind: HTTPRoute, name: storefront}\n  default: {maxRetries: 1}")),
    ("PA-S02", "spec.targetRefs", retry("  targetRefs: []\n  default: {maxRetries: 1}"), retry(ROUTE + "  default: {maxRetries: 1}")),
    ("PA-S03", "spec.targetRefs",
     retry("  targetRefs:\n" + "".join(f"  - {{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r{i}}}\n" for i in range(17)) + "  default: {maxRetries: 1}"),
     retry("  targetRefs:\n" + "".join(f"  - {{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r{i}}}\n" for i in range(16)) + "  default: {maxRetries: 1}")),
    ("PA-S04", "spec.targetRefs[0].kind",
     retry("  targetRefs: [{group: gateway.networking.k8s.io, kind: Http Route, name: storefront}]\n  default: {maxRetries: 1}"),
     retry(ROUTE + "  default: {maxRetries: 1}")),
    ("PA-S04", "spec.targetRefs[0].group",
     retry("  targetRefs: [{group: gateway.networking.k8s.io/v1, kind: HTTPRoute, name: storefront}]\n  default: {maxRetries: 1}"),
     retry(ROUTE + "  default: {maxRetries: 1}")),
    ("PA-S04", "spec.targetRefs[0].group",
     retry("  targetRefs: [{kind: HTTPRoute, name: storefront}]\n  default: {maxRetries: 1}"),
     retry(ROUTE + "  default: {maxRetries: 1}")),
    ("PA-S05", "spec.targetRefs[1]",
     retry("  targetRefs:\n  - {group: gateway.networking.k8s.io, kind: Gateway, name: gw, namespace: infra}\n"
           "  - {group: gateway.networking.k8s.io, kind: Gateway, name: gw, namespace: infra}\n  default: {maxRetries: 1}", namespace="infra"),
     retry("  targetRefs:\n  - {group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: http}\n"
           "  - {group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: https}\n  default: {maxRetries: 1}", namespace="infra")),
    ("PA-S06", "spec.default", health(SVC + "  default: {path: /healthz}"), health(SVC + "  path: /healthz")),
    ("PA-S07", "spec", retry(ROUTE + "  default: {maxRetries: 1}\n  defaults: {retryOn: ['502']}"),
     retry(ROUTE + "  defaults: {maxRetries: 1}\n  overrides: {retryOn: ['502']}")),
    ("PA-S08", "spec.override", retry(ROUTE + "  override: 3"), retry(ROUTE + "  override: {maxRetries: 3}")),
    ("PA-S09", "spec.maxRetries", retry(ROUTE + "  maxRetries: 2\n  default: {retryOn: ['502']}"), retry(ROUTE + "  default: {maxRetries: 2, retryOn: ['502']}")),
    ("PA-S10", "spec.default", retry(ROUTE + "  default: {}"), retry(ROUTE + "  default: {maxRetries: 0}")),
    ("PA-S10", "spec", retry(ROUTE.rstrip()), retry(ROUTE + "  maxRetries: 2")),
    ("PA-S11", "spec.default.maxRetries", retry(ROUTE + "  default: {maxRetries: 1}\n  override: {maxRetries: 2}"),
     retry(ROUTE + "  default: {maxRetries: 1}\n  override: {retryOn: ['502']}")),
    ("PA-S11", "spec.default.backoff.baseInterval",
     retry(ROUTE + "  default: {backoff: {baseInterval: 1s}}\n  override: {backoff: {baseInterval: 2s}}"),
     retry(ROUTE + "  default: {backoff: {baseInterval: 1s}}\n  override: {backoff: {maxInterval: 2s}}")),
    ("PA-T01", "spec.targetRefs[0].kind", retry("  targetRefs: [{group: '', kind: ConfigMap, name: x}]\n  default: {maxRetries: 1}"),
     retry(ROUTE + "  default: {maxRetries: 1}")),
    ("PA-T02", "spec.targetRefs",
     health("  targetRefs:\n  - {group: '', kind: Service, name: foo}\n  - {group: gateway.networking.k8s.io, kind: HTTPRoute, name: storefront}\n  path: /"),
     health("  targetRefs:\n  - {group: '', kind: Service, name: foo}\n  - {group: '', kind: Service, name: foo, sectionName: https}\n  path: /")),
    ("PA-T03", "spec.targetRefs[0].namespace",
     retry("  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: storefront, namespace: apps}]\n  default: {maxRetries: 1}", namespace="shop"),
     retry("  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: storefront, namespace: apps}]\n  default: {maxRetries: 1}", namespace="infra")),
    ("PA-T04", "spec.targetRefs[0].name", retry("  targetRefs: [{group: '', kind: Namespace, name: infra}]\n  default: {maxRetries: 1}"),
     retry("  targetRefs: [{group: '', kind: Namespace, name: apps}]\n  default: {maxRetries: 1}")),
    ("PA-T10", "spec.targetRefs[0].kind", retry("  targetRefs: [{group: gateway.networking.k8s.io, kind: GatewayClass, name: acme}]\n  default: {maxRetries: 1}"),
     """
apiVersion: policies.example.com/v1alpha1
kind: ConnectionLimitPolicy
metadata: {name: limits}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: GatewayClass, name: acme}]
  override: {maxConnections: 100}
"""),
    ("PA-T05", "spec.targetRefs[0].sectionName", retry("  targetRefs: [{group: '', kind: Namespace, name: apps, sectionName: x}]\n  default: {maxRetries: 1}"),
     retry("  targetRefs: [{group: '', kind: Service, name: foo, sectionName: http}]\n  default: {maxRetries: 1}")),
    ("PA-T06", "spec.targetRefs[0]", retry("  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: nope}]\n  default: {maxRetries: 1}"),
     retry(ROUTE + "  default: {maxRetries: 1}")),
    ("PA-T07", "spec.targetRefs[0].sectionName",
     retry("  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: grpc}]\n  default: {maxRetries: 1}", namespace="infra"),
     retry("  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: https}]\n  default: {maxRetries: 1}", namespace="infra")),
    ("PA-T09", "spec.targetRefs[0].kind", retry("  targetRefs: [{group: gateway.networking.k8s.io, kind: httproute, name: storefront}]\n  default: {maxRetries: 1}"),
     retry(ROUTE + "  default: {maxRetries: 1}")),
    ("PA-K01", "",
     """
apiVersion: vendor.example.org/v1
kind: MysteryPolicy
metadata: {name: m, namespace: apps}
spec:
  targetRefs: [{group: '', kind: Service, name: foo}]
  default: {x: 1}
""",
     retry(ROUTE + "  default: {maxRetries: 1}")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("rule", "field", "bad", "near_miss"), CASES, ids=[f"{c[0]}:{c[1]}" for c in CASES]
)
def test_rule_fires_on_its_case_and_not_on_the_near_miss(
    cluster: Store, rule: str, field: str, bad: str, near_miss: str
) -> None:
    assert field in fired(admit(cluster, bad)).get(rule, []), fired(admit(cluster, bad))
    assert rule not in fired(admit(cluster, near_miss)), fired(admit(cluster, near_miss))


def test_every_rule_of_the_table_is_covered_by_a_case_or_a_dedicated_test() -> None:
    covered = {case[0] for case in CASES} | DEDICATED
    assert {rule.id for rule in RULES if not rule.id.startswith("PA-C")} <= covered


# PA-K02 and PA-K03 judge policy kinds, not policies: tests/core/audit/test_reports.py.
DEDICATED = {
    "PA-S00", "PA-S12", "PA-S13", "PA-S14", "PA-S15", "PA-S16", "PA-S17", "PA-T08", "PA-K02",
    "PA-K03",
}  # fmt: skip


def test_unreadable_spec_is_denied_not_a_crash(cluster: Store) -> None:
    verdict = admit(
        cluster,
        "apiVersion: policies.example.com/v1alpha1\nkind: RetryPolicy\nmetadata: {name: p, namespace: apps}\nspec: just a string\n",
    )
    assert not verdict.allowed
    assert fired(verdict) == {"PA-S00": ["spec"]}


PROFILE = """
kinds:
- group: policies.example.com
  kind: RetryPolicy
  exclusiveStanzas: true
  wrapperSpelling: plural
  overridesForbiddenOn: [{group: gateway.networking.k8s.io, kind: HTTPRoute}]
"""


def test_exclusive_stanzas_profile_denies_default_with_override() -> None:
    store = store_of(POLICY_CRDS, CLUSTER, config=config_of(PROFILE))
    both = retry(ROUTE.replace("HTTPRoute, name: storefront", "Gateway, name: gw, namespace: infra")
                 + "  defaults: {maxRetries: 1}\n  overrides: {retryOn: ['502']}")  # fmt: skip
    assert "PA-S12" in fired(admit(store, both))
    assert "PA-S12" not in fired(admit(store, retry(ROUTE + "  defaults: {maxRetries: 1}")))


def test_override_on_a_kind_the_profile_forbids_is_denied() -> None:
    store = store_of(POLICY_CRDS, CLUSTER, config=config_of(PROFILE))
    assert "PA-S13" in fired(admit(store, retry(ROUTE + "  overrides: {maxRetries: 1}")))
    assert "PA-S13" not in fired(admit(store, retry(ROUTE + "  defaults: {maxRetries: 1}")))


def test_wrapper_spelling_the_operator_config_sets_is_denied() -> None:
    store = store_of(POLICY_CRDS, CLUSTER, config=config_of(PROFILE))
    verdict = admit(store, retry(ROUTE + "  default: {maxRetries: 1}"))
    assert fired(verdict)["PA-S15"] == ["spec"]
    assert not verdict.allowed
    assert "PA-S15" not in fired(admit(store, retry(ROUTE + "  defaults: {maxRetries: 1}")))


VENDOR_CRDS = REALWORLD / "crds"
KUADRANT_LIKE = (VENDOR_CRDS / "kuadrant.yaml").read_text(encoding="utf-8")
NGF_LIKE = (VENDOR_CRDS / "nginx-gateway-fabric.yaml").read_text(encoding="utf-8")
EG_LIKE = (VENDOR_CRDS / "envoy-gateway.yaml").read_text(encoding="utf-8")


def rate_limit(spec: str) -> str:
    return f"""
apiVersion: kuadrant.io/v1
kind: RateLimitPolicy
metadata: {{name: rl, namespace: apps}}
spec:
{spec}
"""


def test_a_catalog_spelling_is_only_warned_about() -> None:
    """SPEC §1.6: a catalog entry never turns a WARN into a DENY."""
    store = store_of(KUADRANT_LIKE, CLUSTER)
    verdict = admit(store, rate_limit(ROUTE + "  default: {limits: {a: {rates: [{limit: 1}]}}}"))
    assert verdict.allowed
    assert fired(verdict) == {"PA-S15": ["spec"]}


# A list or a map is no strategy either, and must not reach a set lookup (unhashable: a 500).
@pytest.mark.parametrize("value", ["sometimes", "Atomic", 3, "[atomic]", "{a: b}"])
def test_an_unknown_merge_strategy_is_denied_where_the_kind_has_one(value: object) -> None:
    store = store_of(KUADRANT_LIKE, CLUSTER)
    bad = rate_limit(ROUTE + f"  defaults: {{strategy: {value}, limits: {{a: {{}}}}}}")
    verdict = admit(store, bad)
    assert fired(verdict)["PA-S14"] == ["spec.defaults.strategy"]
    assert not verdict.allowed
    good = rate_limit(ROUTE + "  defaults: {strategy: merge, limits: {a: {}}}")
    assert "PA-S14" not in fired(admit(store, good))


def test_a_stanza_holding_only_a_merge_selector_has_nothing_to_apply() -> None:
    store = store_of(KUADRANT_LIKE, CLUSTER)
    verdict = admit(store, rate_limit(ROUTE + "  defaults: {strategy: atomic}"))
    assert fired(verdict) == {"PA-S10": ["spec.defaults"]}
    assert "merge selector" in verdict.denials[0].message


def test_a_merge_selector_is_no_setting_for_pa_s11() -> None:
    store = store_of(KUADRANT_LIKE, CLUSTER)
    both = rate_limit(
        ROUTE.replace("HTTPRoute, name: storefront", "Gateway, name: gw, namespace: infra")
        + "  defaults: {strategy: atomic, limits: {a: {}}}\n"
        + "  overrides: {strategy: merge, limits: {b: {}}}"
    )
    assert "PA-S11" not in fired(admit(store, both))


def test_strategy_of_a_kind_without_a_selector_is_a_setting_unless_a_strategy() -> None:
    """docs/decisions.md: no false denial for a kind whose stanzas hold a real `strategy`."""
    lb = admit(cluster_store(), retry(ROUTE + "  default: {strategy: RoundRobin}"))
    assert lb.allowed and "PA-S14" not in fired(lb) and "PA-S10" not in fired(lb)
    only = admit(cluster_store(), retry(ROUTE + "  default: {strategy: atomic}"))
    assert fired(only) == {"PA-S10": ["spec.default"]}


@pytest.mark.parametrize("crds", [True, False], ids=["with-crd", "without-crd"])
@pytest.mark.parametrize(
    "spec",
    [
        "  default: {backoff: {}}",  # Envoy Gateway's `http3: {}`: on, with no options
        "  default: {retryOn: []}",  # its `alpnProtocols: []`: ALPN off
        "  default: {backoff: {baseInterval: {}}}",  # Kuadrant's `anonymous: {}`, deeper down
        "  override: {backoff: {}}\n  default: {}",
        "  backoff: {}",  # in the spec proper, no wrapper
    ],
)
def test_a_setting_written_as_an_empty_object_or_list_is_something_to_apply(
    spec: str, crds: bool
) -> None:
    """PA-S10 and the first principle: vendors give empty values meanings, their API servers
    accept them, so they are not `nothing to apply` — with the kind's schema or without it."""
    store = cluster_store() if crds else store_of(CLUSTER)
    verdict = admit(store, retry(ROUTE + spec))
    assert "PA-S10" not in fired(verdict), verdict
    assert verdict.allowed


def test_a_stanza_of_nulls_has_nothing_to_apply() -> None:
    """The API server prunes a null from what it stores: the policy is `default: {}` there."""
    verdict = admit(cluster_store(), retry(ROUTE + "  default: {maxRetries: null}"))
    assert fired(verdict) == {"PA-S10": ["spec.default"]}


def cluster_store() -> Store:
    return store_of(POLICY_CRDS, CLUSTER)


@pytest.mark.parametrize(
    ("ref", "hint"),
    [
        ("{kind: HTTPRoute, name: storefront}", '"gateway.networking.k8s.io"'),
        ("{kind: Gateway, name: gw}", '"gateway.networking.k8s.io"'),
        ("{kind: Service, name: foo}", '"", the core group'),
        ("{kind: Backend, name: b}", '"" for the core group, e.g. Service;'),
    ],
)
def test_a_missing_group_hint_names_the_group_of_the_kind(ref: str, hint: str) -> None:
    verdict = admit(cluster_store(), retry(f"  targetRefs: [{ref}]\n  default: {{maxRetries: 1}}"))
    (finding,) = [j.finding for j in verdict.judged if j.finding.field.endswith(".group")]
    assert finding.rule_id == "PA-S04" and hint in finding.message


@pytest.mark.parametrize("group", ["core", ""])
def test_core_names_the_core_group_in_a_target(group: str) -> None:
    """SPEC §1.4: `group: core` (NGINX Gateway Fabric's spelling) is the core group."""
    verdict = admit(
        cluster_store(),
        retry(
            f"  targetRefs: [{{group: {group!r}, kind: Service, name: foo}}]\n  default: {{maxRetries: 1}}"
        ),
    )
    # No target rule speaks; the impact preview shows the policy reaching the Service.
    assert verdict.warning_lines() == [
        "[PA-C04] changes maxRetries on 1 Service (apps/foo unset→1)"
    ]


def test_core_in_a_grant_admits_a_core_target() -> None:
    grant = """
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: svc, namespace: apps}
spec:
  from: [{group: policies.example.com, kind: RetryPolicy, namespace: infra}]
  to: [{group: core, kind: Service}]
"""
    store = store_of(POLICY_CRDS, CLUSTER, grant)
    far = retry(
        "  targetRefs: [{group: core, kind: Service, name: foo, namespace: apps}]\n  default: {maxRetries: 1}",
        namespace="infra",
    )
    verdict = admit(store, far)
    assert verdict.allowed and not set(fired(verdict)) - {"PA-C04"}, fired(verdict)


def test_a_target_kind_outside_the_configured_list_is_denied() -> None:
    config = config_of(
        "kinds:\n- group: policies.example.com\n  kind: RetryPolicy\n"
        "  targets: [{group: gateway.networking.k8s.io, kind: HTTPRoute}]\n"
    )
    store = store_of(POLICY_CRDS, CLUSTER, config=config)
    verdict = admit(store, retry(SVC + "  default: {maxRetries: 1}"))
    assert not verdict.allowed
    assert "cannot target Service; allowed: HTTPRoute" in verdict.denials[0].message


def test_a_target_kind_outside_the_default_list_is_only_warned_about(cluster: Store) -> None:
    verdict = admit(
        cluster,
        retry("  targetRefs: [{group: '', kind: ConfigMap, name: x}]\n  default: {maxRetries: 1}"),
    )
    assert verdict.allowed
    (warning,) = verdict.warnings
    assert warning.rule_id == "PA-T01" and "effect not shown" in warning.message
    # The field names the kind; the line says which kinds it knows (SPEC §2.5: 120 characters).
    assert warning.text == (
        "[PA-T01] spec.targetRefs[0].kind: not a known target, effect not shown "
        "(known: Gateway API kinds, Service, Namespace)"
    )


SELECTOR = "  targetSelectors: [{kind: HTTPRoute, matchLabels: {app: shop}}]\n"


def labelled_route(labels: str) -> str:
    return f"""
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: checkout, namespace: apps, labels: {labels}}}
spec:
  parentRefs: [{{name: gw, namespace: infra}}]
"""


def test_target_selectors_alone_are_a_target() -> None:
    store = store_of(POLICY_CRDS, CLUSTER, labelled_route("{app: shop}"))
    verdict = admit(store, retry(SELECTOR + "  default: {maxRetries: 1}"))
    assert verdict.allowed and fired(verdict) == {}


def test_target_selectors_matching_nothing_warn_like_a_missing_target() -> None:
    store = store_of(POLICY_CRDS, CLUSTER, labelled_route("{app: other}"))
    verdict = admit(store, retry(SELECTOR + "  default: {maxRetries: 1}"))
    assert verdict.allowed and fired(verdict) == {"PA-T06": ["spec.targetSelectors[0]"]}


def test_empty_target_selectors_are_no_target(cluster: Store) -> None:
    verdict = admit(cluster, retry("  targetSelectors: []\n  default: {maxRetries: 1}"))
    assert fired(verdict) == {"PA-S02": ["spec.targetRefs"]}


@pytest.mark.parametrize(
    ("selectors", "field"),
    [
        ("[{matchLabels: {app: shop}}]", "spec.targetSelectors[0].kind"),
        ("[{kind: HTTPRoute, matchLabels: {app: 3}}]", "spec.targetSelectors[0].matchLabels"),
        (
            "[{kind: HTTPRoute, group: gateway.networking.k8s.io/v1}]",
            "spec.targetSelectors[0].group",
        ),
        ("{kind: HTTPRoute}", "spec.targetSelectors"),
        ("[oops]", "spec.targetSelectors[0]"),
    ],
)
def test_malformed_target_selectors_are_pa_s04(cluster: Store, selectors: str, field: str) -> None:
    verdict = admit(cluster, retry(f"  targetSelectors: {selectors}\n  default: {{maxRetries: 1}}"))
    assert field in fired(verdict).get("PA-S04", []), fired(verdict)


def test_target_being_deleted_warns(cluster: Store) -> None:
    route = dict(
        cluster.get(
            next(k for k in cluster.keys(GroupKind("gateway.networking.k8s.io", "HTTPRoute")))
        )
        or {}
    )
    route["metadata"] = {**route["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}
    cluster.upsert(route)
    verdict = admit(cluster, retry(ROUTE + "  default: {maxRetries: 1}"))
    assert verdict.allowed
    assert fired(verdict) == {"PA-T08": ["spec.targetRefs[0]"]}
    cluster.upsert(
        {
            **route,
            "metadata": {k: v for k, v in route["metadata"].items() if k != "deletionTimestamp"},
        }
    )
    assert "PA-T08" not in fired(admit(cluster, retry(ROUTE + "  default: {maxRetries: 1}")))


def test_every_violation_is_reported_not_just_the_first(cluster: Store) -> None:
    verdict = admit(cluster, retry(
        "  targetRef: {group: gateway.networking.k8s.io/v1, kind: HTTPRoute, name: storefront}\n"
        "  targetRefs: [{group: '', kind: ConfigMap, name: x}]\n"
        "  default: {maxRetries: 1}\n  defaults: {retryOn: ['502']}\n  maxRetries: 4"))  # fmt: skip
    assert {"PA-S01", "PA-S04", "PA-S07", "PA-S09", "PA-T01"} <= set(fired(verdict))
    assert {"PA-S01", "PA-S04", "PA-S07", "PA-S09"} <= {f.rule_id for f in verdict.denials}


def test_deny_rules_deny_and_warn_rules_only_warn(cluster: Store) -> None:
    denied = admit(cluster, retry(ROUTE + "  override: 3"))
    warned = admit(
        cluster,
        retry(
            "  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: nope}]\n  default: {maxRetries: 1}"
        ),
    )
    assert not denied.allowed
    assert warned.allowed and [f.rule_id for f in warned.warnings] == ["PA-T06"]


def test_strict_turns_warnings_into_denials(cluster: Store) -> None:
    missing = retry(
        "  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: nope}]\n  default: {maxRetries: 1}"
    )
    assert admit(cluster, missing).allowed
    assert not admit(cluster, missing, Settings(strict=True)).allowed


@pytest.mark.parametrize(
    ("actions", "allowed", "warned", "audited"),
    [
        ({"PA-T06": "deny"}, False, [], []),
        ({"PA-T06": "audit"}, True, [], ["PA-T06"]),
        ({"PA-T06": "off"}, True, [], []),
        ({}, True, ["PA-T06"], []),
    ],
)
def test_global_rule_actions_change_the_verdict(
    cluster: Store, actions: dict[str, Any], allowed: bool, warned: list[str], audited: list[str]
) -> None:
    missing = retry(
        "  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: nope}]\n  default: {maxRetries: 1}"
    )
    verdict = admit(cluster, missing, Settings(rule_actions=actions))
    assert verdict.allowed is allowed
    assert [f.rule_id for f in verdict.warnings] == warned
    assert [f.rule_id for f in verdict.audited] == audited


def test_kind_profile_rule_action_beats_the_global_one() -> None:
    config = config_of(
        "kinds:\n- {group: policies.example.com, kind: RetryPolicy, ruleActions: {PA-T06: warn}}\n"
    )
    store = store_of(POLICY_CRDS, CLUSTER, config=config)
    missing = retry(
        "  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: nope}]\n  default: {maxRetries: 1}"
    )
    assert admit(store, missing, Settings(rule_actions={"PA-T06": "deny"})).allowed


def test_legacy_true_label_infers_class_without_pa_k01() -> None:
    crd = POLICY_CRDS.split("---")[0].replace("policy: inherited", "policy: 'true'")
    store = store_of(crd, CLUSTER)
    direct_shape = retry(ROUTE + "  maxRetries: 3")
    verdict = admit(store, direct_shape)
    assert verdict.allowed
    assert not {"PA-K01", "PA-S06", "PA-S09"} & set(fired(verdict))


def observability(targets: str) -> str:
    return f"""
apiVersion: gateway.nginx.org/v1alpha2
kind: ObservabilityPolicy
metadata: {{name: o, namespace: apps}}
spec:
  targetRefs: {targets}
  tracing: {{strategy: ratio}}
"""


def test_a_direct_kind_may_mix_the_target_kinds_its_vendor_lists() -> None:
    store = store_of(NGF_LIKE, CLUSTER)
    both = "[{group: gateway.networking.k8s.io, kind: HTTPRoute, name: storefront}, {group: gateway.networking.k8s.io, kind: GRPCRoute, name: g}]"
    assert "PA-T02" not in fired(admit(store, observability(both)))
    config = config_of(
        "kinds:\n- group: gateway.nginx.org\n  kind: ObservabilityPolicy\n"
        "  targets: [{group: gateway.networking.k8s.io, kind: HTTPRoute}, "
        "{group: gateway.networking.k8s.io, kind: GRPCRoute}]\n"
    )
    configured = store_of(NGF_LIKE, CLUSTER, config=config)
    assert "PA-T02" in fired(admit(configured, observability(both)))


@pytest.mark.parametrize(
    ("policy", "targets"),
    [
        (  # kgateway's CEL: Gateway, HTTPRoute, GRPCRoute or a ListenerSet
            "apiVersion: gateway.kgateway.dev/v1alpha1\nkind: TrafficPolicy",
            "[{group: gateway.networking.k8s.io, kind: HTTPRoute, name: storefront},"
            " {group: gateway.networking.k8s.io, kind: GRPCRoute, name: g}]",
        ),
        (  # Gateway API's CRD restricts no kind; Envoy Gateway's e2e tests name a ServiceImport
            "apiVersion: gateway.networking.k8s.io/v1\nkind: BackendTLSPolicy",
            "[{group: '', kind: Service, name: foo},"
            " {group: multicluster.x-k8s.io, kind: ServiceImport, name: foo}]",
        ),
    ],
    ids=["kgateway-trafficpolicy", "backendtlspolicy"],
)
def test_a_catalog_kind_may_mix_every_target_kind_its_vendor_accepts(
    policy: str, targets: str
) -> None:
    """Its API server takes such a mix: PA-T02 would be a false denial (SPEC first principle)."""
    text = f"{policy}\nmetadata: {{name: p, namespace: apps}}\nspec:\n  targetRefs: {targets}\n"
    verdict = admit(store_of(CLUSTER), text + "  timeouts: {request: 5s}\n")
    assert "PA-T02" not in fired(verdict), fired(verdict)
    assert verdict.allowed


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [
        ("gateway.networking.k8s.io/v1", "BackendTLSPolicy"),
        ("gateway.networking.x-k8s.io/v1alpha1", "XBackendTrafficPolicy"),
    ],
)
def test_a_kind_whose_schema_restricts_no_target_kind_may_mix_any(
    api_version: str, kind: str
) -> None:
    """Gateway API's backend policies leave backends to each implementation: a Service and a
    kind the catalog has never heard of in one policy are accepted by its API server, so they
    are no PA-T02 (DENY); the unknown kind is PA-T01 (WARN), as anywhere. An operator who
    lists the kind's targets gets PA-T02 back."""
    text = f"""
apiVersion: {api_version}
kind: {kind}
metadata: {{name: p, namespace: apps}}
spec:
  targetRefs:
  - {{group: '', kind: Service, name: foo}}
  - {{group: backends.example.net, kind: MeshBackend, name: foo}}
  validation: {{hostname: foo.example.com, wellKnownCACertificates: System}}
"""
    verdict = admit(store_of(CLUSTER), text)
    assert verdict.allowed, fired(verdict)
    assert "PA-T02" not in fired(verdict)
    assert fired(verdict)["PA-T01"] == ["spec.targetRefs[1].kind"]
    group = api_version.split("/")[0]
    config = config_of(
        f"kinds:\n- group: {group}\n  kind: {kind}\n"
        "  targets: [{group: '', kind: Service}, {group: backends.example.net, kind: MeshBackend}]\n"
    )
    assert "PA-T02" in fired(admit(store_of(CLUSTER, config=config), text))


def test_an_object_whose_target_reference_carries_an_api_version_is_no_policy() -> None:
    """A VerticalPodAutoscaler's targetRef names a Deployment by apiVersion and kind: `check`
    over a folder holding one must not judge it as a policy (and deny it, PA-S04)."""
    vpa = one(
        "apiVersion: autoscaling.k8s.io/v1\nkind: VerticalPodAutoscaler\n"
        "metadata: {name: envoy, namespace: apps}\n"
        "spec:\n  targetRef: {apiVersion: apps/v1, kind: Deployment, name: envoy}\n"
    )
    store = store_of(CLUSTER)
    assert not store.is_policy_object(key_of(vpa).group_kind, vpa)  # type: ignore[union-attr]
    policy_shaped = one(
        "apiVersion: vendor.example.org/v1\nkind: MysteryPolicy\n"
        "metadata: {name: m, namespace: apps}\n"
        "spec:\n  targetRef: {group: '', kind: Service, name: foo}\n  path: /\n"
    )
    assert store.is_policy_object(key_of(policy_shaped).group_kind, policy_shaped)  # type: ignore[union-attr]


KUADRANT_RATE_LIMITS = ("RateLimitPolicy", "TokenRateLimitPolicy")
KUADRANT_WHEN = "  when: [{predicate: \"request.path != '/health'\"}]\n"
KUADRANT_LIMITS = "{limits: {a: {rates: [{limit: 1, window: 10s}]}}}"


def kuadrant(kind: str, spec: str) -> str:
    version = "v1" if kind != "TokenRateLimitPolicy" else "v1alpha1"
    return f"""
apiVersion: kuadrant.io/{version}
kind: {kind}
metadata: {{name: rl, namespace: apps}}
spec:
{spec}
"""


@pytest.mark.parametrize("with_crds", [True, False], ids=["vendor-crds", "catalog-only"])
@pytest.mark.parametrize("stanza", ["defaults", "overrides"])
@pytest.mark.parametrize("kind", KUADRANT_RATE_LIMITS)
def test_a_top_level_when_beside_a_kuadrant_rate_limit_stanza_is_warned_not_denied(
    kind: str, stanza: str, with_crds: bool
) -> None:
    """The first principle: Kuadrant's CEL on its rate limit kinds refuses `limits` beside a
    stanza but accepts `when`, which its Go types then ignore (they read the stanza alone).
    The API server admits the policy, so the webhook warns (PA-S16) instead of denying
    (PA-S09), and the effective policy is the stanza alone, as Kuadrant applies it."""
    store = store_of(KUADRANT_LIKE, CLUSTER) if with_crds else store_of(CLUSTER)
    text = kuadrant(kind, ROUTE.replace("targetRefs: [", "targetRef: ").replace("}]", "}")
                    + KUADRANT_WHEN + f"  {stanza}: {KUADRANT_LIMITS}")  # fmt: skip
    verdict = admit(store, text)
    assert verdict.allowed, fired(verdict)
    assert fired(verdict)["PA-S16"] == ["spec.when"]
    assert "PA-S09" not in fired(verdict)
    message = next(j.finding.message for j in verdict.judged if j.finding.rule_id == "PA-S16")
    assert f"beside spec.{stanza}" in message and len(f"[PA-S16] spec.when: {message}") <= 120
    profile = profiles.base_profile(GroupKind("kuadrant.io", kind), None)
    policy = read_policy(one(text), profile)
    assert policy is not None
    assert "when" not in (policy.default or {}) and "when" not in (policy.override or {})
    # What the vendor's CEL refuses beside a stanza stays a denial.
    limits_beside = text.replace(KUADRANT_WHEN, "  limits: {b: {rates: [{limit: 2}]}}\n")
    refused = admit(store, limits_beside)
    assert fired(refused)["PA-S09"] == ["spec.limits"] and not refused.allowed
    assert "PA-S16" not in fired(refused)


def test_a_top_level_when_beside_an_auth_policy_stanza_stays_denied() -> None:
    """AuthPolicy's CEL refuses `when` beside `defaults` (and `overrides`): its API server
    refuses the policy too, so PA-S09 denies it."""
    store = store_of(KUADRANT_LIKE, CLUSTER)
    target = ROUTE.replace("targetRefs: [", "targetRef: ").replace("}]", "}")
    text = kuadrant("AuthPolicy", target + KUADRANT_WHEN
                    + "  defaults: {rules: {authentication: {k: {anonymous: {}}}}}")  # fmt: skip
    verdict = admit(store, text)
    assert fired(verdict)["PA-S09"] == ["spec.when"] and not verdict.allowed


def test_an_operator_may_deny_what_pa_s16_warns_about() -> None:
    store = store_of(CLUSTER, config=config_of(
        "kinds:\n- group: kuadrant.io\n  kind: RateLimitPolicy\n  ruleActions: {PA-S16: deny}\n"
    ))  # fmt: skip
    target = ROUTE.replace("targetRefs: [", "targetRef: ").replace("}]", "}")
    verdict = admit(store, kuadrant("RateLimitPolicy", target + KUADRANT_WHEN
                                    + f"  defaults: {KUADRANT_LIMITS}"))  # fmt: skip
    assert fired(verdict)["PA-S16"] == ["spec.when"] and not verdict.allowed


GATEWAY_REF = "  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]\n"


def vendor_policy(api_version: str, kind: str, spec: str) -> str:
    """A policy in the namespace of what it targets: `apps` for a route, `infra` for a Gateway."""
    namespace = "infra" if "kind: Gateway," in spec else "apps"
    return f"""
apiVersion: {api_version}
kind: {kind}
metadata: {{name: p, namespace: {namespace}}}
spec:
{spec}
"""


@pytest.mark.parametrize("with_crds", [True, False], ids=["vendor-crds", "catalog-only"])
@pytest.mark.parametrize(
    ("api_version", "kind", "spec", "says"),
    [
        ("gateway.envoyproxy.io/v1alpha1", "BackendTrafficPolicy", ROUTE, "replaces less specific"),
        ("gateway.envoyproxy.io/v1alpha1", "ClientTrafficPolicy", GATEWAY_REF, "replaces less specific"),
        ("gateway.envoyproxy.io/v1alpha1", "SecurityPolicy", ROUTE + "  timeout: null\n", "replaces less specific"),
        ("gateway.envoyproxy.io/v1alpha1", "EnvoyExtensionPolicy", ROUTE, "replaces less specific"),
        ("gateway.envoyproxy.io/v1alpha1", "BackendTrafficPolicy", ROUTE + "  mergeType: StrategicMerge\n", "changes nothing"),
        ("gateway.nginx.org/v1alpha1", "ClientSettingsPolicy", GATEWAY_REF, "changes nothing"),
        ("gateway.nginx.org/v1alpha1", "ProxySettingsPolicy", GATEWAY_REF, "changes nothing"),
        ("gateway.nginx.org/v1alpha1", "RateLimitPolicy", GATEWAY_REF, "changes nothing"),
    ],
)  # fmt: skip
def test_a_policy_that_sets_nothing_is_warned_where_its_vendor_accepts_it(
    api_version: str, kind: str, spec: str, says: str, with_crds: bool
) -> None:
    """The first principle: these vendors' CRDs require no setting and no CEL rule asks for
    one, so their API servers accept a policy that sets nothing — and Envoy Gateway applies
    it, replacing the less specific policies whole (its translator tests). PA-S17 warns and
    says what it does; PA-S10 would have denied it."""
    store = store_of(EG_LIKE, NGF_LIKE, CLUSTER) if with_crds else store_of(CLUSTER)
    verdict = admit(store, vendor_policy(api_version, kind, spec))
    assert verdict.allowed, fired(verdict)
    assert fired(verdict).get("PA-S17") == ["spec"] and "PA-S10" not in fired(verdict)
    message = next(j.finding.message for j in verdict.judged if j.finding.rule_id == "PA-S17")
    assert says in message and len(f"[PA-S17] spec: {message}") <= 120


@pytest.mark.parametrize(
    "text",
    [
        rate_limit(ROUTE.replace("targetRefs: [", "targetRef: ").replace("}]", "}")),
        retry(ROUTE),
        vendor_policy("gateway.nginx.org/v1alpha1", "WAFPolicy", GATEWAY_REF),
    ],
    ids=["kuadrant-cel-refuses-it", "no-vendor-to-ask", "ngf-waf-requires-type"],
)
def test_a_policy_that_sets_nothing_stays_denied_where_no_vendor_accepts_it(text: str) -> None:
    """Kuadrant's CEL asks for `limits`, NGINX's WAFPolicy requires `type`, and a kind the
    catalog does not know has SPEC's PA-S10 (DENY)."""
    verdict = admit(cluster_store(), text)
    assert fired(verdict).get("PA-S10") == ["spec"] and not verdict.allowed
    assert "PA-S17" not in fired(verdict)


def test_an_operator_may_deny_what_pa_s17_warns_about() -> None:
    text = vendor_policy("gateway.envoyproxy.io/v1alpha1", "BackendTrafficPolicy", ROUTE)
    verdict = admit(store_of(CLUSTER), text, Settings(rule_actions={"PA-S17": "deny"}))
    assert fired(verdict).get("PA-S17") == ["spec"] and not verdict.allowed


FIXTURE_TARGET_REFS = "targetRefs: {type: array, maxItems: 16, items: {type: object}}"


def crds_with_retry_target_refs(schema: str) -> str:
    """The unit tests' policy CRDs, RetryPolicy's `targetRefs` described by `schema`."""
    assert FIXTURE_TARGET_REFS in POLICY_CRDS
    return POLICY_CRDS.replace(FIXTURE_TARGET_REFS, f"targetRefs: {schema}", 1)


def many_refs(count: int, api_version: str = "policies.example.com/v1alpha1",
              kind: str = "RetryPolicy") -> str:  # fmt: skip
    refs = "".join(
        f"  - {{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r{i}}}\n"
        for i in range(count)
    )
    return f"""
apiVersion: {api_version}
kind: {kind}
metadata: {{name: w, namespace: apps}}
spec:
  targetRefs:
{refs}  defaults: {{maxRetries: 1}}
"""


@pytest.mark.parametrize(
    ("schema", "count", "limit"),
    [
        ("{type: array, maxItems: 16, items: {type: object}}", 17, 16),
        ("{type: array, maxItems: 20, items: {type: object}}", 21, 20),
        ("{type: array, maxItems: 20, items: {type: object}}", 20, None),
        ("{type: array, items: {type: object}}", 40, None),
    ],
    ids=["crd-16", "crd-20-over", "crd-20-at", "crd-no-limit"],
)
def test_the_installed_crd_s_max_items_is_the_target_refs_limit(
    schema: str, count: int, limit: int | None
) -> None:
    """PA-S03 denies what the API server refuses and nothing more (SPEC's first principle):
    its limit is the CRD's `maxItems` on `targetRefs`, and a CRD without one accepts any
    number, as Envoy Gateway's do."""
    store = store_of(crds_with_retry_target_refs(schema), CLUSTER)
    verdict = admit(store, many_refs(count))
    if limit is None:
        assert "PA-S03" not in fired(verdict)
    else:
        assert fired(verdict)["PA-S03"] == ["spec.targetRefs"] and not verdict.allowed
        message = next(j.finding.message for j in verdict.judged if j.finding.rule_id == "PA-S03")
        assert message == f"has {count} entries; at most {limit} are allowed"


@pytest.mark.parametrize(
    ("api_version", "kind", "denied"),
    [
        ("gateway.envoyproxy.io/v1alpha1", "ClientTrafficPolicy", False),
        ("gateway.envoyproxy.io/v1alpha1", "BackendTrafficPolicy", False),
        ("gateway.networking.k8s.io/v1", "BackendTLSPolicy", True),
        ("policies.example.com/v1alpha1", "RetryPolicy", True),
    ],
)
def test_without_the_crd_the_catalog_s_limit_applies_else_gep_713_s(
    api_version: str, kind: str, denied: bool
) -> None:
    """`check` without CRDs: Envoy Gateway's kinds have no limit (the catalog), Gateway API's
    BackendTLSPolicy and a kind nobody describes have GEP-713's 16."""
    verdict = admit(store_of(CLUSTER), many_refs(17, api_version, kind))
    assert ("PA-S03" in fired(verdict)) is denied


REF_SCHEMA = (
    "{{type: array, items: {{type: object, required: [{required}],"
    " properties: {{group: {{type: string}}, kind: {{type: string}}, name: {{type: string}}}}}}}}"
)


@pytest.mark.parametrize(
    ("schema", "denied"),
    [
        (REF_SCHEMA.format(required="group, kind, name"), True),
        (REF_SCHEMA.format(required="kind, name"), False),
        ("{type: array, items: {type: object}}", True),
    ],
    ids=["crd-requires-group", "crd-lets-group-out", "crd-says-nothing-of-refs"],
)
def test_a_ref_without_group_is_pa_s04_where_the_installed_crd_requires_one(
    schema: str, denied: bool
) -> None:
    """The API server refuses a ref without `group` exactly when the ref's schema requires it,
    before any validating webhook runs; where the CRD lets it out (Linkerd's), PA-S04 has
    nothing to say and the ref is read as the core group: here the target rules judge it as a
    Namespace, this one's own. A CRD that does not describe the ref's fields leaves it to the
    catalog, then GEP-713 (required)."""
    store = store_of(crds_with_retry_target_refs(schema), CLUSTER)
    verdict = admit(
        store, retry("  targetRefs: [{kind: Namespace, name: apps}]\n  default: {maxRetries: 1}")
    )
    if denied:
        assert fired(verdict)["PA-S04"] == ["spec.targetRefs[0].group"] and not verdict.allowed
    else:
        assert verdict.allowed and "PA-S04" not in fired(verdict), fired(verdict)
        other = retry("  targetRefs: [{kind: Namespace, name: infra}]\n  default: {maxRetries: 1}")
        assert fired(admit(store, other)).get("PA-T04") == ["spec.targetRefs[0].name"]


LINKERD_NAMESPACE_POLICY = """
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: p, namespace: apps}
spec:
  targetRef: {kind: Namespace, name: apps}
  requiredAuthenticationRefs: [{name: web, kind: ServiceAccount}]
"""


@pytest.mark.parametrize(
    ("api_version", "denied"),
    [("policy.linkerd.io/v1alpha1", False), ("policies.example.com/v1alpha1", True)],
    ids=["linkerd-catalog", "unknown-kind"],
)
def test_without_the_crd_the_catalog_says_whether_a_ref_may_leave_out_its_group(
    api_version: str, denied: bool
) -> None:
    """`check` without CRDs: Linkerd's AuthorizationPolicy lets `group` out (catalog, as its
    reference publishes a Namespace target without one); a kind nobody describes keeps
    GEP-713's required group."""
    text = LINKERD_NAMESPACE_POLICY.replace("policy.linkerd.io/v1alpha1", api_version)
    verdict = admit(store_of(CLUSTER), text)
    assert ("PA-S04" in fired(verdict)) is denied
    assert verdict.allowed is not denied


def test_linkerd_s_overrides_list_is_a_setting_not_a_stanza() -> None:
    """Linkerd's HTTPLocalRateLimitPolicy spells its per-client limits `overrides`, a list: read
    as a GEP-713 wrapper it would be PA-S08 and PA-S09 (DENY) for a policy Linkerd publishes."""
    text = """
apiVersion: policy.linkerd.io/v1alpha1
kind: HTTPLocalRateLimitPolicy
metadata: {name: web-rl, namespace: apps}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: web-http}
  total: {requestsPerSecond: 100}
  overrides:
  - requestsPerSecond: 25
    clientRefs: [{kind: ServiceAccount, namespace: apps, name: special-client}]
"""
    verdict = admit(store_of(CLUSTER), text)
    assert verdict.allowed and not fired(verdict), fired(verdict)


def test_a_security_policy_listing_thousands_of_cidrs_is_not_denied() -> None:
    """Envoy Gateway's `clientCIDRs` has no `maxItems`, and allow- or deny-lists of cloud or
    country ranges run to thousands: a list of strings is one leaf to every rule, so such a
    policy is judged like any other, not refused as too large to read (PA-S00)."""
    cidrs = ", ".join(f"10.{i // 256}.{i % 256}.0/24" for i in range(10_000))
    text = f"""
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: SecurityPolicy
metadata: {{name: allow-offices, namespace: apps}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: storefront}}]
  authorization:
    defaultAction: Deny
    rules:
    - action: Allow
      principal: {{clientCIDRs: [{cidrs}]}}
"""
    verdict = admit(store_of(CLUSTER), text)
    assert verdict.allowed, fired(verdict)
    assert "PA-S00" not in fired(verdict)
