"""AdmissionReview v1 wire format: shapes, decoding and the response vocabulary.

Two error channels, as in every admission webhook: a broken *webhook call* (not JSON, no
`request.uid`, wrong `apiVersion`) raises `MalformedReview`, which the server answers with
HTTP 400 so the API server's `failurePolicy` decides; a broken *user request* goes back
inside `response.status`, where `kubectl` shows it to the user.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NotRequired, TypedDict

from webhook.core.findings import Verdict
from webhook.core.ruletable import RULES_BY_ID

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


class GroupVersionKind(TypedDict):
    group: str
    version: str
    kind: str


class GroupVersionResource(TypedDict):
    group: str
    version: str
    resource: str


class UserInfo(TypedDict, total=False):
    username: str
    uid: str
    groups: list[str]


class Request(TypedDict):
    uid: str
    kind: GroupVersionKind
    resource: GroupVersionResource
    subResource: NotRequired[str]
    name: NotRequired[str]
    namespace: NotRequired[str]
    operation: Operation
    userInfo: NotRequired[UserInfo]
    object: NotRequired[dict[str, Any] | None]
    oldObject: NotRequired[dict[str, Any] | None]
    dryRun: NotRequired[bool]
    options: NotRequired[dict[str, Any] | None]


class StatusCause(TypedDict):
    type: str
    field: str
    message: str


class StatusDetails(TypedDict, total=False):
    name: str
    group: str
    kind: str
    causes: list[StatusCause]


class Status(TypedDict, total=False):
    code: int
    reason: str
    message: str
    details: StatusDetails


class Response(TypedDict, total=False):
    uid: str
    allowed: bool
    status: Status
    warnings: list[str]
    auditAnnotations: dict[str, str]
    patch: str
    patchType: Literal["JSONPatch"]


class MalformedReview(ValueError):
    """The HTTP body is not an AdmissionReview v1 request we can answer."""


_OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})


def decode_review(body: bytes) -> Request:
    """Parse and check the envelope; the object inside is left to the rules, whatever it is."""
    try:
        review = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedReview(f"body is not JSON: {exc}") from None
    if not isinstance(review, dict):
        raise MalformedReview("body is not a JSON object")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != KIND:
        raise MalformedReview(
            f"expected apiVersion {API_VERSION} kind {KIND}, got "
            f"{review.get('apiVersion')!r} {review.get('kind')!r}"
        )
    request = review.get("request")
    if not isinstance(request, dict):
        raise MalformedReview("review has no `request` object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise MalformedReview("request has no `uid`")
    if request.get("operation") not in _OPERATIONS:
        raise MalformedReview(
            f"request.operation {request.get('operation')!r} is not one of {sorted(_OPERATIONS)}"
        )
    kind = request.get("kind")
    if not isinstance(kind, dict) or not isinstance(kind.get("kind"), str):
        raise MalformedReview("request.kind must be {group, version, kind}")
    for name in ("object", "oldObject"):
        if request.get(name) is not None and not isinstance(request.get(name), dict):
            raise MalformedReview(f"request.{name} must be an object or null")
    return request  # type: ignore[return-value]


def encode_review(response: Response) -> bytes:
    return json.dumps(
        {"apiVersion": API_VERSION, "kind": KIND, "response": response},
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()


# --- the response vocabulary ----------------------------------------------------------------


def allowed(
    uid: str, *, warnings: Sequence[str] = (), audit: Mapping[str, str] | None = None
) -> Response:
    response: Response = {"uid": uid, "allowed": True}
    if warnings:
        response["warnings"] = list(warnings)
    if audit:
        response["auditAnnotations"] = dict(audit)
    return response


def patched(uid: str, operations: Sequence[Mapping[str, Any]]) -> Response:
    """Allowed, with a JSON Patch (RFC 6902), base64-encoded as the API requires."""
    response: Response = {"uid": uid, "allowed": True}
    if operations:
        raw = json.dumps(list(operations), separators=(",", ":"), ensure_ascii=False).encode()
        response["patch"] = base64.b64encode(raw).decode("ascii")
        response["patchType"] = "JSONPatch"
    return response


def from_verdict(uid: str, verdict: Verdict, *, request: Request) -> Response:
    """Allowed-with-warnings, or denied as 422 Invalid with one cause per denial (SPEC §2.5)."""
    audit = {"decision": "allowed" if verdict.allowed else "denied"}
    if verdict.rule_ids:
        audit["rules"] = ",".join(verdict.rule_ids)
    audited = [f.text for f in verdict.audited]
    if audited:
        audit["audit-findings"] = "; ".join(audited)[:4096]
    if verdict.allowed:
        return allowed(uid, warnings=verdict.warning_lines(), audit=audit)
    denials = verdict.denials
    obj = request.get("object") or request.get("oldObject") or {}
    name = str((obj.get("metadata") or {}).get("name") or request.get("name") or "")
    kind = request["kind"]
    summary = "; ".join(f.text for f in denials)
    response: Response = {
        "uid": uid,
        "allowed": False,
        "status": {
            "code": 422,
            "reason": "Invalid",
            "message": f'{kind["kind"]} "{name}" is invalid: {summary}',
            "details": {
                "name": name,
                "group": kind.get("group", ""),
                "kind": kind["kind"],
                "causes": [
                    {
                        "type": RULES_BY_ID[f.rule_id].cause_type,
                        "field": f.field,
                        "message": f"[{f.rule_id}] {f.message}",
                    }
                    for f in denials
                ],
            },
        },
        "auditAnnotations": audit,
    }
    warnings = verdict.warning_lines()
    if warnings:
        response["warnings"] = warnings
    return response
