"""`trim` keeps what the rules, the engine and the reconciler read, and nothing else."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.fixtures.yaml_state import CLUSTER, POLICY_CRDS, docs, one, store_of
from webhook.core.model import kinds
from webhook.core.model.profiles import profile_from_crd
from webhook.core.model.refs import GroupKind
from webhook.core.state.store import Store
from webhook.core.state.trim import MARK, as_admitted, fingerprint, mark_of, relevant, trim

KEY = "policy-attachment.dev/effective-policies"

API_METADATA = """
name: gw
namespace: infra
uid: 4f6c1d2e-0000-4000-8000-000000000001
resourceVersion: "4242"
generation: 3
creationTimestamp: "2024-05-01T10:00:00Z"
deletionTimestamp: "2024-05-02T10:00:00Z"
labels: {team: edge}
annotations:
  policy-attachment.dev/effective-policies: '{"version":1}'
  kubectl.kubernetes.io/last-applied-configuration: '{"a huge": "blob"}'
ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: owner, uid: x}]
finalizers: [example.net/cleanup]
managedFields:
- {manager: kubectl, operation: Apply, fieldsType: FieldsV1, fieldsV1: {f:spec: {}}}
"""


def gateway() -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": one(API_METADATA),
        "spec": one("""
            gatewayClassName: acme
            listeners:
            - {name: https, port: 443, protocol: HTTPS, allowedRoutes: {namespaces: {from: All}}}
            """),
        "status": {"conditions": [{"type": "Accepted", "status": "True"}]},
    }


def test_metadata_keeps_identity_version_deletion_and_labels_and_drops_the_rest() -> None:
    metadata = trim(gateway(), keep_annotation=KEY)["metadata"]
    assert metadata == {
        "name": "gw",
        "namespace": "infra",
        "resourceVersion": "4242",
        "generation": 3,
        "deletionTimestamp": "2024-05-02T10:00:00Z",
        "labels": {"team": "edge"},
    }


def test_a_policy_keeps_its_uid_and_age_which_no_other_kind_is_read_for() -> None:
    """SPEC §4.4 orders policies by age; an audit names a policy by uid. A Gateway, a route,
    a Service is never a policy (`kinds.NEVER_POLICIES`): its uid and age are not kept."""
    policy = gateway() | {"apiVersion": "policies.example.com/v1alpha1", "kind": "RetryPolicy"}
    metadata = trim(policy, keep_annotation=KEY)["metadata"]
    assert metadata["uid"] == "4f6c1d2e-0000-4000-8000-000000000001"
    assert metadata["creationTimestamp"] == "2024-05-01T10:00:00Z"


@pytest.mark.parametrize("gk", sorted(kinds.ANNOTATED_KINDS))
def test_an_annotated_object_shown_to_mutate_and_as_written_compare_equal(gk: GroupKind) -> None:
    """`as_admitted` relies on this: no kind we annotate is ever a policy, so what the API
    server adds as it stores a new object (uid, creation time) is not kept of it."""
    api_version = f"{gk.group}/v1" if gk.group else "v1"
    shown = gateway() | {"apiVersion": api_version, "kind": gk.kind}
    del shown["metadata"]["uid"], shown["metadata"]["creationTimestamp"]
    written = copy.deepcopy(shown)
    written["metadata"].update(uid="u-1", creationTimestamp="2024-05-01T10:00:00Z")
    assert gk in kinds.NEVER_POLICIES
    assert as_admitted(shown) == as_admitted(written)


def test_our_annotation_is_kept_as_a_short_fingerprint_equal_for_equal_values() -> None:
    """A value runs to kilobytes on each object; the reconciler only compares it."""
    value = '{"policies":{' + '"x":1,' * 2000 + '"y":2},"truncated":false,"version":1}'
    trimmed = trim(_annotated(value), keep_annotation=KEY)
    kept = trimmed[MARK]
    assert isinstance(kept, bytes) and len(kept) == 16 < len(value)
    assert kept == fingerprint(value) == mark_of(trimmed, KEY) == mark_of(_annotated(value), KEY)
    assert kept != fingerprint(value.replace('"y":2', '"y":3'))
    assert "annotations" not in trimmed["metadata"]
    assert trim(trimmed, keep_annotation=KEY) == trimmed  # the same, however often trimmed


def test_the_mark_is_no_input_of_a_summary() -> None:
    """Our own patches come back as writes of the mark alone: nothing to recompute."""
    assert relevant(trim(_annotated("{}"), keep_annotation=KEY)) == relevant(trim(gateway()))
    assert relevant(trim(_annotated("{}"), keep_annotation=KEY)) == relevant(
        trim(_annotated('{"version":1}'), keep_annotation=KEY)
    )


def test_a_value_of_our_annotation_that_is_no_string_is_no_value_of_ours() -> None:
    """Someone else's edit; the reconciler reads it as no value of ours and puts ours back."""
    for value in (None, 7, {"a": 1}):
        trimmed = trim(_annotated(value), keep_annotation=KEY)
        assert MARK not in trimmed
        assert mark_of(trimmed, KEY) is None is mark_of(_annotated(value), KEY)


def test_only_kinds_we_annotate_keep_a_mark() -> None:
    """No rule reads a policy's top-level fields expecting ours; nor does the reconciler mark
    any other kind."""
    policy = _annotated("{}") | {"apiVersion": "policies.example.com/v1", "kind": "RetryPolicy"}
    assert MARK not in trim(policy, keep_annotation=KEY)
    assert MARK in trim(_annotated("{}"), keep_annotation=KEY)


def _annotated(value: object) -> dict[str, Any]:
    obj = gateway()
    obj["metadata"]["annotations"] = {KEY: value}
    return obj


def test_only_the_effective_policies_annotation_survives() -> None:
    assert "annotations" not in trim(gateway())["metadata"]
    assert MARK not in trim(gateway())
    assert MARK not in trim(gateway(), keep_annotation="other/key")
    assert "annotations" not in trim(gateway(), keep_annotation="other/key")["metadata"]


def test_gateway_api_objects_keep_their_whole_spec_and_lose_status() -> None:
    original = gateway()
    trimmed = trim(original, keep_annotation=KEY)
    assert trimmed["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert trimmed["kind"] == "Gateway"
    assert trimmed["spec"] == original["spec"]
    assert "status" not in trimmed


def test_policies_keep_their_whole_spec() -> None:
    policy = one("""
        apiVersion: policies.example.com/v1alpha1
        kind: RetryPolicy
        metadata: {name: r, namespace: apps, managedFields: [{manager: kubectl}]}
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: storefront}]
          default: {maxRetries: 3, backoff: {baseInterval: 1s}}
        status: {ancestors: []}
        """)
    assert trim(policy) == {
        "apiVersion": policy["apiVersion"],
        "kind": "RetryPolicy",
        "metadata": {"name": "r", "namespace": "apps"},
        "spec": policy["spec"],
    }


def test_services_keep_only_port_names_numbers_and_protocols() -> None:
    service = one("""
        apiVersion: v1
        kind: Service
        metadata: {name: foo, namespace: apps}
        spec:
          type: ClusterIP
          clusterIP: 10.0.0.12
          clusterIPs: [10.0.0.12]
          selector: {app: foo}
          sessionAffinity: None
          ports:
          - {name: http, port: 80, protocol: TCP, targetPort: 8080, appProtocol: http}
          - {name: dns, port: 53, protocol: UDP, targetPort: dns}
        status: {loadBalancer: {}}
        """)
    assert trim(service)["spec"] == {
        "ports": [
            {"name": "http", "port": 80, "protocol": "TCP"},
            {"name": "dns", "port": 53, "protocol": "UDP"},
        ]
    }


def test_a_service_without_ports_keeps_an_empty_spec() -> None:
    service = one(
        "{apiVersion: v1, kind: Service, metadata: {name: x}, spec: {type: ExternalName}}"
    )
    assert trim(service)["spec"] == {}


ROUTE = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: storefront, namespace: apps}
spec:
  parentRefs: [{name: gw, namespace: infra, sectionName: https, port: 443}]
  hostnames: [shop.example.com]
  rules:
  - name: browse
    matches: [{path: {type: PathPrefix, value: /browse}, headers: [{name: x-beta, value: "1"}]}]
    filters: [{type: RequestHeaderModifier, requestHeaderModifier: {add: [{name: a, value: b}]}}]
    timeouts: {request: 10s}
    backendRefs:
    - name: foo
      port: 80
      weight: 90
      filters: [{type: RequestMirror, requestMirror: {backendRef: {name: shadow, port: 80}}}]
    - {group: "", kind: Service, namespace: other, name: bar, port: 8080, weight: 10}
  - matches: [{path: {type: Exact, value: /health}}]
    backendRefs: [{name: foo}]
status: {parents: []}
"""


def test_routes_keep_their_parents_and_each_rules_name_and_backends_only() -> None:
    """What `attachment.parent_refs` and `backend_refs` read, and rule names (sections):
    matches, filters, hostnames, timeouts and weights are no input of anything computed."""
    route = one(ROUTE)
    assert trim(route)["spec"] == {
        "parentRefs": route["spec"]["parentRefs"],
        "rules": [
            {
                "name": "browse",
                "backendRefs": [
                    {"name": "foo", "port": 80},
                    {
                        "group": "",
                        "kind": "Service",
                        "namespace": "other",
                        "name": "bar",
                        "port": 8080,
                    },
                ],
            },
            {"backendRefs": [{"name": "foo"}]},
        ],
    }


@pytest.mark.parametrize("kind", ["GRPCRoute", "TLSRoute", "TCPRoute", "UDPRoute"])
def test_every_route_kind_is_trimmed_alike(kind: str) -> None:
    route = one(ROUTE)
    route["kind"] = kind
    assert trim(route)["spec"] == trim(one(ROUTE))["spec"]


def test_a_canary_weight_or_a_match_edit_is_no_change_to_what_is_read() -> None:
    """So it recomputes nothing (`relevant`); a new backend or a renamed rule is a change."""
    before = one(ROUTE)
    shifted = copy.deepcopy(before)
    shifted["spec"]["rules"][0]["backendRefs"][0]["weight"] = 50
    shifted["spec"]["rules"][0]["matches"] = [{"path": {"type": "Exact", "value": "/"}}]
    shifted["spec"]["hostnames"] = ["store.example.com"]
    assert relevant(trim(shifted)) == relevant(trim(before))
    renamed = copy.deepcopy(before)
    renamed["spec"]["rules"][0]["name"] = "shop"
    rerouted = copy.deepcopy(before)
    rerouted["spec"]["rules"][1]["backendRefs"][0]["name"] = "baz"
    for changed in (renamed, rerouted):
        assert relevant(trim(changed)) != relevant(trim(before))


def test_namespaces_keep_name_and_labels_but_no_spec_status_or_annotations() -> None:
    namespace = one("""
        apiVersion: v1
        kind: Namespace
        metadata:
          name: apps
          labels: {gateway-access: "true", kubernetes.io/metadata.name: apps}
          annotations: {owner: team-a}
        spec: {finalizers: [kubernetes]}
        status: {phase: Active}
        """)
    assert trim(namespace, keep_annotation=KEY) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "apps",
            "labels": {"gateway-access": "true", "kubernetes.io/metadata.name": "apps"},
        },
    }


def policy_crd() -> dict[str, Any]:
    crd = docs(POLICY_CRDS)[0]  # RetryPolicy, inherited
    crd["metadata"]["annotations"] = {"controller-gen.kubebuilder.io/version": "v0.16.0"}
    crd["spec"]["names"]["listKind"] = "RetryPolicyList"
    crd["spec"]["conversion"] = {"strategy": "None"}
    version = crd["spec"]["versions"][0]
    version["subresources"] = {"status": {}}
    version["additionalPrinterColumns"] = [{"name": "Age", "type": "date"}]
    version["schema"]["openAPIV3Schema"]["properties"]["status"] = {"type": "object"}
    crd["status"] = {"acceptedNames": {"kind": "RetryPolicy"}, "storedVersions": ["v1alpha1"]}
    return crd


def test_policy_crds_keep_discovery_fields_and_the_spec_schema_only() -> None:
    crd = policy_crd()
    trimmed = trim(crd)
    assert trimmed["metadata"] == {
        "name": "retrypolicies.policies.example.com",
        "labels": {"gateway.networking.k8s.io/policy": "inherited"},
    }
    assert trimmed["spec"] == {
        "group": "policies.example.com",
        "names": {"kind": "RetryPolicy", "plural": "retrypolicies", "listKind": "RetryPolicyList"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "properties": {
                            "spec": crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
                                "properties"
                            ]["spec"]
                        }
                    }
                },
            }
        ],
    }
    assert "status" not in trimmed


@pytest.mark.parametrize("crd", docs(POLICY_CRDS), ids=lambda c: c["spec"]["names"]["kind"])
def test_a_trimmed_policy_crd_gives_the_same_profile(crd: dict[str, Any]) -> None:
    assert profile_from_crd(trim(crd)) == profile_from_crd(crd)


def test_other_crds_lose_their_schemas() -> None:
    crd = policy_crd()
    del crd["metadata"]["labels"]
    (version,) = trim(crd)["spec"]["versions"]
    assert version == {"name": "v1alpha1", "served": True, "storage": True}


def test_a_crd_with_an_unknown_policy_label_value_is_not_a_policy_crd() -> None:
    crd = policy_crd()
    crd["metadata"]["labels"]["gateway.networking.k8s.io/policy"] = "maybe"
    assert "schema" not in trim(crd)["spec"]["versions"][0]


def test_trim_leaves_its_input_untouched() -> None:
    original = gateway()
    before = copy.deepcopy(original)
    trim(original, keep_annotation=KEY)
    assert original == before


@pytest.mark.parametrize(
    "obj",
    [
        {},
        {"kind": "Gateway"},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": "ports"},
        {"apiVersion": "v1", "kind": "Service", "metadata": "x", "spec": {"ports": ["80"]}},
        {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
         "metadata": {"name": "c", "labels": None}, "spec": {"versions": ["v1", None]}},
        {"apiVersion": "policies.example.com/v1", "kind": "RetryPolicy", "spec": "not an object"},
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "spec": ["rules"]},
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
         "spec": {"rules": "all", "parentRefs": None}},
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GRPCRoute",
         "spec": {"rules": [None, "x", {"backendRefs": "foo"}, {"backendRefs": [7, {"name": "s"}]}]}},
    ],
)  # fmt: skip
def test_malformed_objects_are_trimmed_without_raising(obj: dict[str, Any]) -> None:
    trimmed = trim(obj)
    assert trimmed.get("kind") == obj.get("kind")


RETRY_POLICY = """
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata:
  name: r
  namespace: apps
  creationTimestamp: "2024-05-01T10:00:00Z"
  annotations: {note: dropped}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: storefront}]
  default: {maxRetries: 3}
status: {ancestors: []}
"""


def test_a_store_of_trimmed_objects_answers_like_one_of_full_objects() -> None:
    full = store_of(POLICY_CRDS, CLUSTER, RETRY_POLICY)
    trimmed = Store()
    for doc in docs(POLICY_CRDS) + docs(CLUSTER) + docs(RETRY_POLICY):
        trimmed.upsert(trim(doc))
    assert trimmed.policy_kinds() == full.policy_kinds()
    assert list(trimmed.policies()) == list(full.policies())
    assert trimmed.namespace_labels("apps") == full.namespace_labels("apps")
    for gk in full.all_kinds():
        assert sorted(trimmed.keys(gk)) == sorted(full.keys(gk))


def test_strings_that_many_objects_hold_alike_are_kept_once() -> None:
    """Each object the informers decode brings its own copy of every string; what many hold
    alike (a group, a kind, a namespace, a section or a referenced Service's name, labels,
    a parentRef's field names) is kept as one string for all of them, equal to what came."""
    text = """{
      "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
      "metadata": {"name": "NAME", "namespace": "shop", "labels": {"team": "shop"}},
      "spec": {
        "parentRefs": [{"name": "gw", "namespace": "infra", "sectionName": "https"}],
        "rules": [{"name": "main", "backendRefs": [{"name": "svc", "port": 80}]}]}}"""
    first, second = (trim(json.loads(text.replace("NAME", name))) for name in ("r1", "r2"))
    assert first == trim(json.loads(text.replace("NAME", "r1")))  # equal to what came

    def strings(obj: Any) -> list[str]:
        found: list[str] = []
        if isinstance(obj, dict):
            for key, value in obj.items():
                found += [key, *strings(value)]
        elif isinstance(obj, list):
            for item in obj:
                found += strings(item)
        elif isinstance(obj, str):
            found.append(obj)
        return found

    shared = [(a, b) for a, b in zip(strings(first), strings(second), strict=True) if a == b]
    assert len(shared) > 15
    assert all(a is b for a, b in shared)
