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

import orjson

from webhook.core.model import json_read
from webhook.core.rules.findings import MAX_LINE, Finding, Verdict, one_line
from webhook.core.rules.ruletable import PREVIEW_RULES, RULES_BY_ID

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
MAX_STATUS_MESSAGE = 4096  # characters of `status.message`; the causes carry every denial

# `auditAnnotations`: the API server records each one in the request's audit event (levels
# Metadata and above) as `<webhook name>/<key>`, e.g. `policies.policy-attachment.dev/verdict`.
# The prefixed key must be a qualified name with one `/`: so a key is at most 63 characters of
# `[A-Za-z0-9._-]`, alphanumeric at both ends; the API server drops any other with a line in
# its own log (k8s.io/apiserver admission/attributes.go, `checkKeyFormat`).
AUDIT_VERDICT = "verdict"  # allowed | warned | denied, as in the decision log (SPEC §8.1)
AUDIT_RULES = "rules"  # the rule IDs that fired, comma-separated
AUDIT_CAUSES = "causes"  # the denials, then the warnings, the user read; no impact preview
AUDIT_FINDINGS = "audit-findings"  # findings of rules set to `audit`, told to nobody (§2.4)
# Characters of one annotation's value: every audit event is built in the API server's memory
# and written per request, so a value stays short (an Event's note has the same bound).
MAX_AUDIT_VALUE = 1024

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


class GroupVersionKind(TypedDict):
    group: NotRequired[str]  # "" for the core group; `decode_review` checks only what is there
    version: NotRequired[str]
    kind: str


class Request(TypedDict):
    """An AdmissionReview's request as `decode_review` returns it: a field is typed as the
    API server sends it where `decode_review` checks it, `object | None` where it does not (read
    with a check of its own, such as `is True`), so that no reader trusts a type nobody checked.

    `object | None` means what `object` would; mypyc (the image's compiled core) builds a
    TypedDict whose field is a plain `NotRequired[object]` into a class that fails to import.
    """

    uid: str
    kind: GroupVersionKind
    resource: NotRequired[object | None]  # {group, version, resource} from a live API server
    subResource: NotRequired[str]
    name: NotRequired[str]
    namespace: NotRequired[str]
    operation: Operation
    userInfo: NotRequired[object | None]  # {username, uid, groups, extra} from a live API server
    object: NotRequired[dict[str, Any] | None]
    oldObject: NotRequired[dict[str, Any] | None]
    dryRun: NotRequired[object | None]  # a bool from a live API server
    options: NotRequired[object | None]


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
    """Parse and check the envelope; the object inside is left to the rules, whatever it is.

    Duplicate keys: the last one wins, as in the API server's own decoder (Go `encoding/json`).
    """
    review = _loads(body)
    if not isinstance(review, dict):
        raise MalformedReview("body is not a JSON object")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != KIND:
        raise MalformedReview(
            f"expected apiVersion {API_VERSION} kind {KIND}, got "
            f"{_short(review.get('apiVersion'))} {_short(review.get('kind'))}"
        )
    request = review.get("request")
    if not isinstance(request, dict):
        raise MalformedReview("review has no `request` object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise MalformedReview("request has no `uid`")
    operation = request.get("operation")
    if not isinstance(operation, str) or operation not in _OPERATIONS:  # a list is unhashable
        raise MalformedReview(
            f"request.operation {_short(operation)} is not one of {sorted(_OPERATIONS)}"
        )
    kind = request.get("kind")
    if (
        not isinstance(kind, dict)
        or not isinstance(kind.get("kind"), str)
        or not all(isinstance(kind.get(name, ""), str) for name in ("group", "version"))
    ):
        raise MalformedReview("request.kind must be {group, version, kind}, all strings")
    for name in ("name", "namespace", "subResource"):
        if request.get(name) is not None and not isinstance(request.get(name), str):
            raise MalformedReview(f"request.{name} must be a string")
    for name in ("object", "oldObject"):
        if request.get(name) is not None and not isinstance(request.get(name), dict):
            raise MalformedReview(f"request.{name} must be an object or null")
    return request  # type: ignore[return-value]


def _loads(body: bytes) -> Any:
    """The body as `json.loads` reads it (`json_read`: by orjson where the two agree), or a
    400's message: `json`'s error, whichever library read it."""
    try:
        return json_read.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedReview(f"body is not JSON: {exc}") from None
    except RecursionError:
        # Python's parser recurses once per level; the API server never nests ~1000 deep.
        raise MalformedReview("body is not JSON we can read: nested too deeply") from None


def _short(value: object, limit: int = 64) -> str:
    """A value quoted in a 400 message, cut short: the body it came from may be megabytes."""
    if isinstance(value, dict | list):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"  # repr could recurse
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def encode_review(response: Response) -> bytes:
    return _json_bytes({"apiVersion": API_VERSION, "kind": KIND, "response": response})


def _json_bytes(value: object) -> bytes:
    """Compact UTF-8 JSON; `ensure_ascii` only when a lone surrogate makes UTF-8 impossible.

    `"\\ud800"` is valid JSON and decodes to a str no codec will encode; escaping it again
    keeps the response well-formed and the echoed uid equal to the one received.

    orjson writes the bytes `json.dumps(value, separators=(",", ":"), ensure_ascii=False)`
    would, faster (docs/performance.md), for what a response holds: dicts with str keys, lists, str,
    int, bool and None (floats it spells differently; no response carries one). What it
    refuses — a lone surrogate, an int over 64 bits, a key that is not a str — goes to json.
    """
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        pass
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":")).encode()


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
        raw = _json_bytes(list(operations))
        response["patch"] = base64.b64encode(raw).decode("ascii")
        response["patchType"] = "JSONPatch"
    return response


def from_verdict(uid: str, verdict: Verdict, *, request: Request) -> Response:
    """Allowed-with-warnings, or denied as 422 Invalid with one cause per denial (SPEC §2.5)."""
    audit = audit_annotations(verdict)
    if verdict.allowed:
        return allowed(uid, warnings=verdict.warning_lines(), audit=audit)
    denials = verdict.denials
    obj = request.get("object") or request.get("oldObject") or {}
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(name, str) or not name:
        name = request.get("name") or ""
    name = one_line(name, 253)  # a Kubernetes name is at most 253 characters
    kind = request["kind"]
    summary = "; ".join(one_line(f.text) for f in denials)
    response: Response = {
        "uid": uid,
        "allowed": False,
        "status": {
            "code": 422,
            "reason": "Invalid",
            "message": one_line(
                f'{kind["kind"]} "{name}" is invalid: {summary}', MAX_STATUS_MESSAGE
            ),
            "details": {
                "name": name,
                "group": kind.get("group", ""),
                "kind": kind["kind"],
                "causes": [
                    {
                        "type": RULES_BY_ID[f.rule_id].cause_type,
                        "field": one_line(f.field, MAX_LINE),
                        "message": one_line(f"[{f.rule_id}] {f.message}"),
                    }
                    for f in denials
                ],
            },
        },
        "auditAnnotations": audit,  # never empty: a denial has a rule
    }
    warnings = verdict.warning_lines()
    if warnings:
        response["warnings"] = warnings
    return response


def audit_annotations(verdict: Verdict) -> dict[str, str]:
    """What the API server's audit log keeps of an answer; nothing for a clean allow.

    `verdict` and `rules` say what happened. `causes` says why, in the lines the user read: the
    audit log keeps no warning, and before Kubernetes 1.24 no denial message either at level
    Metadata (`responseStatus` had only code and reason). An impact preview (PA-C04) that only
    warns is named in `rules` but left out of `causes`: it describes the change asked for, not a
    problem, and nearly every policy write has one (alone it records no Event either, and
    reports leave it out). `audit-findings` holds what the rules set to `audit` found, which
    reaches no user (SPEC §2.4).
    """
    rules = verdict.rule_ids
    if not rules:  # nothing fired, or only rules switched off
        return {}
    annotations = {AUDIT_VERDICT: verdict.outcome, AUDIT_RULES: ",".join(rules)}
    told = verdict.denials + tuple(f for f in verdict.warnings if f.rule_id not in PREVIEW_RULES)
    if told:
        annotations[AUDIT_CAUSES] = _audit_value(told)
    audited = verdict.audited
    if audited:
        annotations[AUDIT_FINDINGS] = _audit_value(audited)
    return annotations


def _audit_value(found: Sequence[Finding]) -> str:
    return one_line("; ".join(one_line(f.text) for f in found), MAX_AUDIT_VALUE)
