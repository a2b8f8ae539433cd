"""PolicyReports (SPEC §8.3): the audit's findings as the Policy working group's
`wgpolicyk8s.io/v1alpha2` documents, which Kyverno and Policy Reporter also write and read.

One `PolicyReport` named `policy-attachment` per namespace that holds policies, one
`ClusterPolicyReport` of that name for cluster-scoped policies and for the findings about
policy kinds. A result per finding: `policy` is the rule ID, `result` `fail` for what admission
would deny and `warn` for the rest, `resources` the policy (or, for a kind, its CRD),
`properties.field` the field path. A clean policy has no result. Each result keeps the time
it was first seen (`timestamp`), carried over from the report it replaces, so that the same
findings make the same document and nothing is written (`same_content`). Pure.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from webhook.core.audit.findings import PolicyAudit
from webhook.core.audit.kind_findings import KindAudit
from webhook.core.model import meta
from webhook.core.model.refs import ObjectKey
from webhook.core.rules.findings import Judged, one_line
from webhook.core.rules.ruletable import RULES_BY_ID

API_VERSION = "wgpolicyk8s.io/v1alpha2"
GROUP, VERSION = API_VERSION.split("/")
NAME = "policy-attachment"
SOURCE = "policy-attachment-webhook"
MANAGED_BY = ("app.kubernetes.io/managed-by", SOURCE)
# A report past this many results keeps the first ones (in order) and counts them all in its
# summary: one object must stay well below the API server's limit (etcd: 1.5 MB), and a result
# takes about 500 bytes. `policy-webhook report` prints them all.
MAX_RESULTS = 1000
OMITTED_ANNOTATION = "policy-attachment.dev/results-omitted"

# A finding's configured action → the result and severity it is reported with. `audit` is a
# warning nobody is shown at admission: reported, at the lowest severity every version of the
# CRD accepts (docs/decisions.md).
RESULT = {"deny": "fail", "warn": "warn", "audit": "warn"}
SEVERITY = {"deny": "high", "warn": "medium", "audit": "low"}
SUMMARY_KEYS = ("pass", "fail", "warn", "error", "skip")

Result = dict[str, Any]


def kind_of(namespace: str) -> str:
    return "PolicyReport" if namespace else "ClusterPolicyReport"


# --- results ---------------------------------------------------------------------------------


def policy_results(audits: Iterable[PolicyAudit]) -> list[Result]:
    """One result per finding of each policy, in order (no timestamps)."""
    out: list[Result] = []
    for audit in sorted(audits, key=lambda a: a.key):
        resource = _policy_resource(audit)
        out.extend(result_of(judged, resource) for judged in audit.findings)
    return out


def kind_results(audits: Iterable[KindAudit]) -> list[Result]:
    """One result per finding about a policy kind, on its CRD."""
    out: list[Result] = []
    for audit in audits:
        resource = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "name": audit.crd_name,
        }
        out.extend(result_of(judged, resource) for judged in audit.findings)
    return out


def namespace_results(
    namespace: str, audits: Iterable[PolicyAudit], kind_results: Sequence[Result]
) -> list[Result]:
    """What the report of `namespace` holds: its policies' results, and — in the cluster's
    (`""`) — the results about policy kinds after them."""
    results = policy_results(audits)
    if not namespace:
        results += kind_results
    return results


def _policy_resource(audit: PolicyAudit) -> dict[str, str]:
    key: ObjectKey = audit.key
    ref = {"apiVersion": audit.api_version, "kind": key.kind, "name": key.name}
    if key.namespace:
        ref["namespace"] = key.namespace
    if audit.uid:
        ref["uid"] = audit.uid
    return ref


def result_of(judged: Judged, resource: Mapping[str, str]) -> Result:
    """One finding on one object (a policy, or a CRD) as a report result, without a timestamp."""
    finding, action = judged.finding, judged.action
    return {
        "source": SOURCE,
        "policy": finding.rule_id,
        "category": RULES_BY_ID[finding.rule_id].category,
        "severity": SEVERITY[action],
        "result": RESULT[action],
        "scored": RESULT[action] == "fail",  # `warn`: "not met, and not scored" (the API's)
        "message": one_line(finding.message),
        "resources": [dict(resource)],
        "properties": {"field": finding.field, "action": action},
    }


def summary(results: Sequence[Result]) -> dict[str, int]:
    counts = Counter(result["result"] for result in results)
    return {key: counts.get(key, 0) for key in SUMMARY_KEYS}


def counts(results: Iterable[Result]) -> Counter[tuple[str, str]]:
    """(rule ID, result) → how many: what the findings gauge exports."""
    return Counter((result["policy"], result["result"]) for result in results)


# --- the documents ---------------------------------------------------------------------------


def report(
    namespace: str,
    results: Sequence[Result],
    *,
    now: float | None,
    previous: Mapping[str, Any] | None = None,
    limit: int | None = MAX_RESULTS,
) -> dict[str, Any]:
    """The report of one namespace (`""`: the ClusterPolicyReport). A result that `previous`
    already holds keeps its timestamp; a new one is stamped `now` (Unix seconds; None: no
    timestamps, for a report printed rather than kept). Past `limit` results (None: no
    limit), the first are kept and the rest counted (`MAX_RESULTS`)."""
    metadata: dict[str, Any] = {"name": NAME, **({"namespace": namespace} if namespace else {})}
    metadata["labels"] = dict([MANAGED_BY])
    seen = _first_seen(previous)
    stamped = [
        result
        if now is None
        else {**result, "timestamp": seen.get(_identity(result)) or _timestamp(now)}
        for result in results
    ]
    if limit is not None and len(stamped) > limit:
        metadata["annotations"] = {OMITTED_ANNOTATION: str(len(stamped) - limit)}
        stamped = stamped[:limit]
    return {
        "apiVersion": API_VERSION,
        "kind": kind_of(namespace),
        "metadata": metadata,
        "summary": summary(results),
        "results": stamped,
    }


def same_content(wanted: Mapping[str, Any], current: Mapping[str, Any] | None) -> bool:
    """Whether `current` (as read from the API server) already says what `wanted` says: its
    summary, its results, our label and annotation. Anything else of it (its metadata, fields
    a newer CRD defaults) is not ours to compare."""
    if current is None:
        return False
    return all(_ours(wanted, part) == _ours(current, part) for part in _COMPARED)


_COMPARED = ("summary", "results", "label", "annotation")


def _ours(doc: Mapping[str, Any], part: str) -> Any:
    if part == "label":
        return meta.labels_of(doc).get(MANAGED_BY[0])
    if part == "annotation":
        return meta.annotations_of(doc).get(OMITTED_ANNOTATION)
    value = doc.get(part)
    return value if value else ([] if part == "results" else None)


def _identity(result: Mapping[str, Any]) -> str:
    """What makes two results the same finding, whenever found."""
    fields = ("policy", "resources", "properties", "message", "result")
    return json.dumps([result.get(f) for f in fields], sort_keys=True)  # key order as sent, or not


def _first_seen(previous: Mapping[str, Any] | None) -> dict[str, Any]:
    results = previous.get("results") if previous is not None else None
    found: dict[str, Any] = {}
    for result in results if isinstance(results, list) else ():
        if isinstance(result, Mapping) and isinstance(result.get("timestamp"), Mapping):
            found.setdefault(_identity(result), dict(result["timestamp"]))
    return found


def _timestamp(now: float) -> dict[str, int]:
    return {"seconds": int(now), "nanos": 0}
