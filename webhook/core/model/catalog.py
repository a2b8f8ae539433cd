"""Built-in kind profiles for the policy kinds of well-known implementations (SPEC §1.6).

Data, one entry per kind, each with the vendor's CRD or documentation page it was read from.
An entry fills in what the CRD label does not say (class) and what SPEC §1.4 would otherwise
guess (targets, wrapper spelling, merge strategy, merge selectors, scope). Precedence, as
SPEC §1.6 sets it: class — config > CRD label > catalog > inference; targets — config >
catalog > §1.4. An entry never turns a WARN into a DENY: a target outside its list is PA-T01 at
WARN unless the operator's config lists the kind's targets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from webhook.core.model.kinds import (
    GATEWAY,
    GATEWAY_CLASS,
    GRPC_ROUTE,
    HTTP_ROUTE,
    LISTENER_SET,
    NAMESPACE,
    SERVICE,
    TCP_ROUTE,
    TLS_ROUTE,
    UDP_ROUTE,
    describe_kinds,
)
from webhook.core.model.refs import GATEWAY_GROUP, GroupKind

if TYPE_CHECKING:  # profiles reads this catalog: its names only for annotations here
    from webhook.core.model.profiles import Merge, PolicyClass, Spelling


GEP_713_MAX_TARGET_REFS = 16  # `targetRefs` in GEP-713's types: maxItems 16


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """What one vendor's policy kind is, as its CRD and documentation say."""

    group_kind: GroupKind
    policy_class: PolicyClass
    targets: frozenset[GroupKind]
    source: str  # the CRD file (repository, path, release) or doc page this entry was read from
    wrapper_spelling: Spelling = "any"
    merge: Merge = "patch"
    # A key inside a `default(s)`/`override(s)` stanza that selects how the stanza merges
    # (Kuadrant's `strategy`: atomic | merge), never a setting (SPEC §1.7).
    stanza_selector: str | None = None
    # A key of the spec proper that, when set, makes the policy merge field by field onto less
    # specific ones instead of replacing them whole (Envoy Gateway's `mergeType`, SPEC §1.7).
    spec_selector: str | None = None
    cluster_scoped: bool = False
    # Keys of `spec` that are the vendor's own settings although spelled like a GEP-713
    # wrapper: kgateway's ListenerPolicy (labelled Direct) keeps its listener settings under
    # `spec.default`, as its docs publish. Such a key is spec proper, never a stanza, so
    # PA-S06/S07/S09 have nothing to say about it.
    setting_keys: frozenset[str] = frozenset()
    # Every target field is optional in the vendor's schema and its docs publish policies
    # with none: a kgateway TrafficPolicy may instead be named by an HTTPRoute rule's
    # `ExtensionRef` filter. Such a policy is not what PA-S02 calls "applies to nothing".
    target_optional: bool = False
    # Keys of the spec proper that the vendor's schema accepts beside a `defaults` or
    # `overrides` stanza, and that the vendor then ignores (it reads the stanza alone):
    # Kuadrant's RateLimitPolicy and TokenRateLimitPolicy take a top-level `when` beside one,
    # where their CEL refuses `limits`. Such a key beside a stanza is PA-S16 (WARN: the API
    # server accepts the policy), not PA-S09.
    ignored_beside_stanzas: frozenset[str] = frozenset()
    # How many `targetRefs` the vendor's schema admits (None: no limit). GEP-713's types
    # cap the list at 16 and most vendors copy that; Envoy Gateway's CRDs set no `maxItems`,
    # and its own tests apply policies naming 18 Gateways. PA-S03 reads the installed CRD's
    # `maxItems` first, this when the CRD is not at hand (`check` without CRDs).
    max_target_refs: int | None = GEP_713_MAX_TARGET_REFS
    # The vendor's schema requires no setting, and no CEL rule asks for one: its API server
    # accepts a policy that sets nothing, and the vendor applies it — under Envoy Gateway's
    # atomic merge, an empty policy on a route replaces the Gateway's whole, so the route gets
    # none of its settings (its translator tests). Such a policy is PA-S17 (WARN), not PA-S10.
    settings_optional: bool = False
    # The vendor's schema lets a target ref leave out `group`, and reads it as the core group
    # then: Linkerd's kinds (`required: [kind, name]`; its AuthorizationPolicy reference says
    # to omit the group of a Namespace target, and its docs do). PA-S04 reads the installed
    # CRD's `required` first, this when the CRD is not at hand (`check` without CRDs).
    target_group_optional: bool = False
    # The vendor's schema restricts no target kind, so one policy may name several kinds (no
    # PA-T02, which SPEC §2.2 reads from GEP-713 for Direct kinds): Gateway API's
    # BackendTLSPolicy and XBackendTrafficPolicy, whose CRDs leave backends to each
    # implementation — agentgateway's translator applies one BackendTLSPolicy to an
    # AgentgatewayBackend and a Service at once. A kind outside `targets` stays PA-T01 (WARN).
    any_target_kinds: bool = False
    # The vendor's own rule for two policies of the kind on one target (None: SPEC's — §5.1,
    # the Direct winner applies whole; §5.2, a tie broken field by field). NGINX Gateway
    # Fabric sorts the policies on a target by SPEC §4.4's order, and a policy that sets one
    # of these fields (dotted paths into its settings; a field set anywhere below counts)
    # where an earlier one, not itself conflicted, sets it too is Conflicted: it applies
    # nothing there. Policies with no such field in common all apply, merged. Read from each
    # kind's `Conflicts` in NGINX Gateway Fabric's internal/controller/nginx/config/policies/
    # and `markConflictedPolicies` in internal/controller/state/graph/policies.go.
    conflict_keys: tuple[str, ...] | None = None


# Gateway API kinds that policies attach to, in the bundles the vendors' CEL rules name.
ROUTES = frozenset({HTTP_ROUTE, GRPC_ROUTE, TCP_ROUTE, UDP_ROUTE, TLS_ROUTE})
GATEWAY_AND_ROUTES = frozenset({GATEWAY, LISTENER_SET, *ROUTES})
GATEWAY_HTTP_GRPC = frozenset({GATEWAY, HTTP_ROUTE, GRPC_ROUTE})
HTTP_GRPC = frozenset({HTTP_ROUTE, GRPC_ROUTE})
ONLY_GATEWAY = frozenset({GATEWAY})
ONLY_SERVICE = frozenset({SERVICE})

# Kinds outside the hierarchy that vendors let their policies name. This webhook does not
# watch them: no PA-T06 for them, and no PA-T05 either (their sections are the vendor's).
GATEWAY_API_X_GROUP = "gateway.networking.x-k8s.io"
X_LISTENER_SET = GroupKind(GATEWAY_API_X_GROUP, "XListenerSet")
EG_BACKEND = GroupKind("gateway.envoyproxy.io", "Backend")
KGATEWAY_BACKEND = GroupKind("gateway.kgateway.dev", "Backend")
SERVICE_IMPORT = GroupKind("multicluster.x-k8s.io", "ServiceImport")
ISTIO_HOSTNAME = GroupKind("networking.istio.io", "Hostname")
AGENTGATEWAY_BACKEND = GroupKind("agentgateway.dev", "AgentgatewayBackend")
INFERENCE_POOL = GroupKind("inference.networking.k8s.io", "InferencePool")
AI_GATEWAY_GROUP = "aigateway.envoyproxy.io"
AI_SERVICE_BACKEND = GroupKind(AI_GATEWAY_GROUP, "AIServiceBackend")

LINKERD_GROUP = "policy.linkerd.io"
LINKERD_SERVER = GroupKind(LINKERD_GROUP, "Server")
LINKERD_HTTP_ROUTE = GroupKind(LINKERD_GROUP, "HTTPRoute")

ENVOY_GATEWAY_GROUP = "gateway.envoyproxy.io"
KUADRANT_GROUP = "kuadrant.io"
NGINX_GROUP = "gateway.nginx.org"
KGATEWAY_GROUP = "gateway.kgateway.dev"

_GATEWAY_API = "kubernetes-sigs/gateway-api v1.6.1 config/crd/experimental/{} (label Direct)"
_ENVOY_GATEWAY = (
    "envoyproxy/gateway v1.9.0 charts/gateway-helm/charts/crds/crds/generated/"
    "gateway.envoyproxy.io_{}.yaml (v1alpha1; no policy label; targets from the spec's CEL)"
)
_KUADRANT = "Kuadrant/kuadrant-operator v1.5.2 config/crd/bases/kuadrant.io_{}.yaml"
_NGINX = "nginx/nginx-gateway-fabric v2.6.7 config/crd/bases/gateway.nginx.org_{}.yaml"
# Where a kind's `conflict_keys` were read: its `Conflicts` (main, August 2026).
_NGINX_CONFLICTS = (
    "; conflicts: internal/controller/nginx/config/policies/{}/validator.go (main, Aug 2026)"
)
_KGATEWAY = (
    "kgateway-dev/kgateway api/v1alpha1/kgateway/{} (main 2026, as released in v2.2-v2.4; "
    "CRDs in install/helm/kgateway-crds/templates/; label Direct)"
)
_AI_GATEWAY = (
    "envoyproxy/ai-gateway v1.1.0 manifests/charts/ai-gateway-crds-helm/templates/"
    "aigateway.envoyproxy.io_{} (label direct; targets from the targetRefs CEL)"
)
_LINKERD = (
    "linkerd/linkerd2 edge-26.8.3 charts/linkerd-crds/templates/policy/{} (no policy label; "
    "targets from policy-controller/k8s/index/src/inbound/{})"
)


def _envoy_gateway(
    kind: str,
    plural: str,
    targets: frozenset[GroupKind],
    *,
    merge_type: bool = False,
    settings_optional: bool = True,
) -> CatalogEntry:
    """Envoy Gateway: Inherited (GEP-713's table), settings in the spec proper; the most
    specific policy replaces the others whole unless it sets `mergeType` (its docs); no
    limit on `targetRefs` (its CRDs set no `maxItems`); no setting required but
    EnvoyPatchPolicy's `type`."""
    return CatalogEntry(
        GroupKind(ENVOY_GATEWAY_GROUP, kind),
        "Inherited",
        targets,
        source=_ENVOY_GATEWAY.format(plural),
        merge="atomic",
        spec_selector="mergeType" if merge_type else None,
        max_target_refs=None,
        settings_optional=settings_optional,
    )


def _kuadrant_stanzas(
    kind: str,
    plural: str,
    targets: frozenset[GroupKind],
    *,
    version: str,
    ignored_beside_stanzas: frozenset[str] = frozenset(),
) -> CatalogEntry:
    """Kuadrant's kinds with `defaults`/`overrides`: `strategy` atomic|merge, atomic when unset
    (the CRD's default); settings in the spec proper are implicit defaults."""
    return CatalogEntry(
        GroupKind(KUADRANT_GROUP, kind),
        "Inherited",
        targets,
        source=_KUADRANT.format(plural) + f" ({version}; label inherited)",
        wrapper_spelling="plural",
        merge="atomic",
        stanza_selector="strategy",
        ignored_beside_stanzas=ignored_beside_stanzas,
    )


def _kuadrant_direct(kind: str, plural: str) -> CatalogEntry:
    """DNSPolicy and TLSPolicy: labelled `direct` (GEP-713's table says Inherited; the CRD's
    label wins over the catalog anyway), no stanzas, Gateway or one of its listeners."""
    return CatalogEntry(
        GroupKind(KUADRANT_GROUP, kind),
        "Direct",
        ONLY_GATEWAY,
        source=_KUADRANT.format(plural) + " (v1; label direct)",
        merge="atomic",
    )


def _nginx(
    kind: str,
    plural: str,
    policy_class: PolicyClass,
    targets: frozenset[GroupKind],
    *,
    version: str,
    merge: Merge = "patch",
    settings_optional: bool = False,
    conflict_keys: tuple[str, ...] | None = None,
) -> CatalogEntry:
    """NGINX Gateway Fabric: no wrappers; each CRD labelled `direct` or `inherited`."""
    return CatalogEntry(
        GroupKind(NGINX_GROUP, kind),
        policy_class,
        targets,
        source=_NGINX.format(plural)
        + f" ({version}; label {policy_class.lower()})"
        + (_NGINX_CONFLICTS.format(kind.lower().removesuffix("policy")) if conflict_keys else ""),
        merge=merge,
        settings_optional=settings_optional,
        conflict_keys=conflict_keys,
    )


def _kgateway(
    kind: str,
    go_file: str,
    targets: frozenset[GroupKind],
    *,
    setting_keys: frozenset[str] = frozenset(),
    target_optional: bool = False,
) -> CatalogEntry:
    """kgateway: every CRD labelled Direct; targetRefs and targetSelectors, no wrappers."""
    return CatalogEntry(
        GroupKind(KGATEWAY_GROUP, kind),
        "Direct",
        targets,
        source=_KGATEWAY.format(go_file),
        setting_keys=setting_keys,
        target_optional=target_optional,
    )


CATALOG: tuple[CatalogEntry, ...] = (
    # Gateway API's own: Service is the Extended support level; the CRD leaves other backends
    # to each implementation, and Envoy Gateway, kgateway and agentgateway document theirs.
    CatalogEntry(
        GroupKind(GATEWAY_GROUP, "BackendTLSPolicy"),
        "Direct",
        frozenset(
            {
                SERVICE,
                SERVICE_IMPORT,
                EG_BACKEND,
                KGATEWAY_BACKEND,
                AGENTGATEWAY_BACKEND,
                INFERENCE_POOL,
            }
        ),
        source=_GATEWAY_API.format("gateway.networking.k8s.io_backendtlspolicies.yaml")
        + ", which restricts no kind; envoyproxy/gateway v1.9.0 site/content/en/latest/tasks/"
        "security/oidc.md and test/e2e (a ServiceImport); kgateway-dev/kgateway.dev "
        "assets/kgw-docs/pages/traffic-management/static.md; agentgateway/agentgateway "
        "controller/pkg/agentgateway/translator/testdata/backends/tls.yaml and "
        "inferencepool.yaml (Aug 2026)",
        any_target_kinds=True,
    ),
    CatalogEntry(
        GroupKind(GATEWAY_API_X_GROUP, "XBackendTrafficPolicy"),
        "Direct",
        frozenset({SERVICE, SERVICE_IMPORT}),  # its targetRefs doc names both
        source=_GATEWAY_API.format("gateway.networking.x-k8s.io_xbackendtrafficpolicies.yaml")
        + ", which restricts no kind",
        any_target_kinds=True,
    ),
    # Envoy Gateway: `mergeType` on the three kinds that have it (xRoute targets only).
    _envoy_gateway(
        "BackendTrafficPolicy", "backendtrafficpolicies", GATEWAY_AND_ROUTES, merge_type=True
    ),
    _envoy_gateway(
        "ClientTrafficPolicy", "clienttrafficpolicies", frozenset({GATEWAY, LISTENER_SET})
    ),
    _envoy_gateway(
        "SecurityPolicy",
        "securitypolicies",
        frozenset({GATEWAY, LISTENER_SET, HTTP_ROUTE, GRPC_ROUTE, TCP_ROUTE}),
        merge_type=True,
    ),
    _envoy_gateway(
        "EnvoyExtensionPolicy", "envoyextensionpolicies", GATEWAY_AND_ROUTES, merge_type=True
    ),
    # No CEL; its task page targets a Gateway, or the GatewayClass when Gateways are merged.
    _envoy_gateway(
        "EnvoyPatchPolicy",
        "envoypatchpolicies",
        frozenset({GATEWAY_CLASS, GATEWAY}),
        settings_optional=False,  # its CRD requires `type`
    ),
    # Kuadrant: `targetRef` (singular) to a Gateway API kind, `sectionName` allowed. The rate
    # limit kinds' CEL refuses `limits` beside a stanza but not `when` (their Go types read the
    # stanza alone then); AuthPolicy's refuses `when`, `patterns` and `rules` alike.
    _kuadrant_stanzas(
        "RateLimitPolicy",
        "ratelimitpolicies",
        GATEWAY_HTTP_GRPC,
        version="v1",
        ignored_beside_stanzas=frozenset({"when"}),
    ),
    _kuadrant_stanzas("AuthPolicy", "authpolicies", GATEWAY_HTTP_GRPC, version="v1"),
    _kuadrant_stanzas(
        "TokenRateLimitPolicy",
        "tokenratelimitpolicies",
        frozenset({GATEWAY, HTTP_ROUTE}),
        version="v1alpha1",
        ignored_beside_stanzas=frozenset({"when"}),
    ),
    _kuadrant_direct("DNSPolicy", "dnspolicies"),
    _kuadrant_direct("TLSPolicy", "tlspolicies"),
    # NGINX Gateway Fabric: `targetRef` for ClientSettingsPolicy, `targetRefs` elsewhere; its
    # examples write `group: core` for a Service.
    _nginx(
        "ClientSettingsPolicy",
        "clientsettingspolicies",
        "Inherited",
        GATEWAY_HTTP_GRPC,
        version="v1alpha1",
        settings_optional=True,  # its CRD requires only the targets
        conflict_keys=(
            "body.maxSize",
            "body.bufferSize",
            "body.timeout",
            "keepAlive.requests",
            "keepAlive.time",
            "keepAlive.timeout",
            "keepAlive.minTimeout",
        ),
    ),
    _nginx(
        "ProxySettingsPolicy",
        "proxysettingspolicies",
        "Inherited",
        GATEWAY_HTTP_GRPC,
        version="v1alpha1",
        settings_optional=True,  # its CRD requires only the targets
        conflict_keys=(
            "buffering.disable",
            "buffering.bufferSize",
            "buffering.buffers",
            "buffering.busyBuffersSize",
            "timeout.connect",
            "timeout.read",
            "timeout.send",
        ),
    ),
    # Its rules never conflict: NGINX applies the rules of every policy on a target. Here a
    # list is one leaf (SPEC §5.3), so the older policy's rules are the ones shown.
    _nginx(
        "RateLimitPolicy",
        "ratelimitpolicies",
        "Inherited",
        GATEWAY_HTTP_GRPC,
        version="v1alpha1",
        settings_optional=True,  # its CRD requires only the targets
        conflict_keys=("rateLimit.dryRun", "rateLimit.logLevel", "rateLimit.rejectCode"),
    ),
    # docs/proposals/nap-waf.md: the more specific WAFPolicy replaces the other one whole.
    _nginx(
        "WAFPolicy",
        "wafpolicies",
        "Inherited",
        GATEWAY_HTTP_GRPC,
        version="v1alpha1",
        merge="atomic",
    ),
    _nginx(
        "ObservabilityPolicy",
        "observabilitypolicies",
        "Direct",
        HTTP_GRPC,
        version="v1alpha2",
        conflict_keys=("tracing",),
    ),
    _nginx(
        "UpstreamSettingsPolicy",
        "upstreamsettingspolicies",
        "Direct",
        ONLY_SERVICE,
        version="v1alpha1",
        conflict_keys=(
            "zoneSize",
            "keepAlive.connections",
            "keepAlive.requests",
            "keepAlive.time",
            "keepAlive.timeout",
            "loadBalancingMethod",
            "hashMethodKey",
            "useClusterIP",
        ),
    ),
    _nginx("SnippetsPolicy", "snippetspolicies", "Direct", ONLY_GATEWAY, version="v1alpha1"),
    # kgateway: TrafficPolicy's CEL takes GRPCRoute too, and any kind ending in "ListenerSet".
    _kgateway(
        "TrafficPolicy",
        "traffic_policy_types.go",
        frozenset({GATEWAY, HTTP_ROUTE, GRPC_ROUTE, LISTENER_SET, X_LISTENER_SET}),
        target_optional=True,
    ),
    _kgateway(
        "BackendConfigPolicy",
        "backend_config_policy_types.go",
        frozenset({SERVICE, KGATEWAY_BACKEND, ISTIO_HOSTNAME}),
    ),
    _kgateway(
        "ListenerPolicy",
        "listener_policy_types.go",
        ONLY_GATEWAY,
        setting_keys=frozenset({"default"}),
    ),
    # Deprecated in v2.2 for ListenerPolicy's `default.httpSettings`; gone after v2.4.
    _kgateway("HTTPListenerPolicy", "http_listener_policy_types.go", ONLY_GATEWAY),
    # Envoy AI Gateway: backend policies of its own backends, or of the Inference Extension's
    # pools; its CEL tests accept one BackendSecurityPolicy on both kinds at once.
    CatalogEntry(
        GroupKind(AI_GATEWAY_GROUP, "BackendSecurityPolicy"),
        "Direct",
        frozenset({AI_SERVICE_BACKEND, INFERENCE_POOL}),
        source=_AI_GATEWAY.format("backendsecuritypolicies.yaml")
        + "; tests/crdcel/testdata/backendsecuritypolicies/targetrefs_mixed.yaml (valid)",
    ),
    CatalogEntry(
        GroupKind(AI_GATEWAY_GROUP, "QuotaPolicy"),
        "Direct",
        frozenset({AI_SERVICE_BACKEND}),
        source=_AI_GATEWAY.format("quotapolicies.yaml"),
    ),
    # Linkerd (a service mesh, GAMMA): `targetRef` (singular) whose `group` may be left out,
    # read as the core group. Its policies attach to its own Servers and routes, which this
    # webhook does not watch, and to a Namespace or Gateway API routes, which it does.
    CatalogEntry(
        GroupKind(LINKERD_GROUP, "AuthorizationPolicy"),
        "Direct",
        frozenset({LINKERD_SERVER, LINKERD_HTTP_ROUTE, HTTP_ROUTE, GRPC_ROUTE, NAMESPACE}),
        source=_LINKERD.format("authorization-policy.yaml", "authorization_policy.rs"),
        target_group_optional=True,
    ),
    # `overrides` is its own setting, a list of per-client limits, not a GEP-713 stanza.
    CatalogEntry(
        GroupKind(LINKERD_GROUP, "HTTPLocalRateLimitPolicy"),
        "Direct",
        frozenset({LINKERD_SERVER}),
        source=_LINKERD.format("http-local-ratelimit-policy.yaml", "ratelimit_policy.rs"),
        setting_keys=frozenset({"overrides"}),
        target_group_optional=True,
    ),
)

BY_KIND: Mapping[GroupKind, CatalogEntry] = {entry.group_kind: entry for entry in CATALOG}


def catalog_markdown() -> str:
    """The body of docs/catalog.md, generated so the page and the data cannot disagree."""
    lines = [
        "| kind | class | targets | stanzas | merge | selectors | read from |",
        "|---|---|---|---|---|---|---|",
    ]
    for entry in sorted(CATALOG, key=lambda e: (e.group_kind.group, e.group_kind.kind)):
        targets = describe_kinds(entry.targets)
        selectors = ", ".join(
            f"`{name}`" for name in (entry.stanza_selector, entry.spec_selector) if name
        )
        scope = " (cluster-scoped)" if entry.cluster_scoped else ""
        stanzas = entry.wrapper_spelling + "".join(
            f"; `{name}` beside them ignored (PA-S16)"
            for name in sorted(entry.ignored_beside_stanzas)
        )
        if entry.settings_optional and entry.policy_class == "Inherited":
            stanzas += "; may set nothing (PA-S17)"
        stanzas += "".join(f"; `{name}` is a setting" for name in sorted(entry.setting_keys))
        if entry.any_target_kinds:
            targets += "; its schema restricts no kind (several in one policy: no PA-T02)"
        if entry.target_group_optional:
            targets += "; a ref may leave out `group` (the core group)"
        merge: str = entry.merge
        if entry.conflict_keys is not None:
            keys = ", ".join(f"`{key}`" for key in entry.conflict_keys)
            merge += f"; on one target, Conflicted when an older one sets {keys} too"
        lines.append(
            f"| `{entry.group_kind}`{scope} | {entry.policy_class} | {targets} | "
            f"{stanzas} | {merge} | {selectors} | {entry.source} |"
        )
    return "\n".join(lines) + "\n"
