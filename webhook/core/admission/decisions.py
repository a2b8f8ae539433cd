"""One admission decision as an admin reviews it (SPEC §8.1): who, what, which verdict, why.

`decision_of` reads the review and the verdict once; `log_fields` is the decision log line's
content, `request_fields` that of a `/mutate` line. The shell writes them and hands the same
`Decision` to the Event recorder (§8.2). No request body is ever copied here. On the hot path:
built only for a line that will be written or an Event that will be recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from webhook.core.admission.reviews import Request
from webhook.core.model import kinds, meta
from webhook.core.model.refs import GroupKind
from webhook.core.rules.findings import Finding, Outcome, Verdict, one_line

LogDecisions = Literal["denied", "warned", "all", "none"]
LOG_DECISIONS: tuple[LogDecisions, ...] = ("denied", "warned", "all", "none")
DEFAULT_LOG_DECISIONS: LogDecisions = "warned"

# SPEC §8.1: denials at WARNING, warnings at INFO, clean allows at DEBUG. The numbers are the
# standard library's logging levels (DEBUG 10, INFO 20, WARNING 30), fixed since Python 2.3.
DEBUG, INFO, WARNING = 10, 20, 30
LEVELS: Mapping[Outcome, int] = {"denied": WARNING, "warned": INFO, "allowed": DEBUG}
# `--log-decisions`: the least level written. `none` is above every level logging has.
THRESHOLDS: Mapping[LogDecisions, int] = {"denied": WARNING, "warned": INFO, "all": DEBUG,
                                          "none": 100}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Decision:
    """A `/validate` answer, described: the object, the user, the verdict and its causes."""

    uid: str
    operation: str
    dry_run: bool
    group: str
    version: str
    kind: str
    namespace: str
    name: str
    object_uid: str  # the stored object's; "" on a CREATE
    user: str
    groups: tuple[str, ...]
    verdict: Outcome  # SPEC §8.1 `verdict`
    rules: tuple[str, ...]
    # What the user was told, each field and message on one line: denials first, then
    # warnings, each in rule order; () for an allow (audited findings reach no user).
    causes: tuple[Finding, ...]

    @property
    def group_kind(self) -> GroupKind:
        return GroupKind(self.group, self.kind)

    @property
    def kind_group(self) -> str:
        """`Kind.group`, or `Kind` alone for the core group (as `kubectl get` spells it)."""
        return str(self.group_kind)

    @property
    def is_policy_write(self) -> bool:
        """Whether the object is a policy (not a target whose delete PA-C05 comments on)."""
        return self.group_kind not in kinds.NEVER_POLICIES


def logged(verdict: Outcome, log_decisions: LogDecisions) -> bool:
    """Whether `--log-decisions` writes a decision with this verdict."""
    return LEVELS[verdict] >= THRESHOLDS[log_decisions]


def decision_of(request: Request, verdict: Verdict) -> Decision:
    """The decision `verdict` made on `request`."""
    kind = request["kind"]
    namespace, name = _named(request)
    user = _user_info(request)
    return Decision(
        uid=request["uid"],
        operation=request["operation"],
        dry_run=request.get("dryRun") is True,
        group=kind.get("group", ""),
        version=kind.get("version", ""),
        kind=kind["kind"],
        namespace=namespace,
        name=name,
        object_uid=_uid_of(request),
        user=_text(user.get("username")),
        groups=_texts(user.get("groups")),
        verdict=verdict.outcome,
        rules=verdict.rule_ids,
        causes=_causes(verdict),
    )


def log_fields(decision: Decision, latency_ms: float) -> dict[str, Any]:
    """The §8.1 fields of the decision log line, in the order an admin reads them; the line's
    `time` is the log record's own."""
    fields: dict[str, Any] = {
        "uid": decision.uid,
        "operation": decision.operation,
        "dryRun": decision.dry_run,
        "kind": decision.kind_group,
        "namespace": decision.namespace,
        "name": decision.name,
        "user": decision.user,
        "groups": list(decision.groups),
        "verdict": decision.verdict,
        "rules": list(decision.rules),
    }
    if decision.causes:
        fields["causes"] = [
            {"rule": c.rule_id, "field": c.field, "message": c.message} for c in decision.causes
        ]
    fields["latencyMs"] = latency_ms
    return fields


def request_fields(request: Request, verdict: str, latency_ms: float) -> dict[str, Any]:
    """The §8.1 fields that mean something without a judged verdict: a `/mutate` decision
    (`patched` or `allowed`), an internal error."""
    kind = request["kind"]
    namespace, name = _named(request)
    return {
        "uid": request["uid"],
        "operation": request["operation"],
        "dryRun": request.get("dryRun") is True,
        "kind": str(GroupKind(kind.get("group", ""), kind["kind"])),
        "namespace": namespace,
        "name": name,
        "user": _text(_user_info(request).get("username")),
        "verdict": verdict,
        "latencyMs": latency_ms,
    }


def _user_info(request: Request) -> Mapping[str, Any]:
    """`userInfo`, or nothing where it is not an object: the decision is described, whoever
    sent it, and a caller's malformed field never turns the answer into a 500."""
    user = request.get("userInfo")
    return user if isinstance(user, Mapping) else {}


def _named(request: Request) -> tuple[str, str]:
    """(namespace, name): the request's, else its object's (a DELETE has only `oldObject`)."""
    obj = request.get("object") or request.get("oldObject")
    return request.get("namespace") or meta.namespace(obj), request.get("name") or meta.name(obj)


def _causes(verdict: Verdict) -> tuple[Finding, ...]:
    return tuple(
        Finding(f.rule_id, one_line(f.field), one_line(f.message))
        for f in (*verdict.denials, *verdict.warnings)
    )


def _uid_of(request: Request) -> str:
    """The stored object's uid (UPDATE, DELETE). A CREATE's object already carries the uid the
    API server chose for it, but a denied one never exists: that uid names nothing."""
    uid = meta.metadata(request.get("oldObject")).get("uid")
    return uid if isinstance(uid, str) else ""


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _texts(values: object) -> tuple[str, ...]:
    """The strings of a list (the API server sends `groups` as one); () for anything else."""
    if isinstance(values, str) or not isinstance(values, Sequence):
        return ()
    return tuple(v for v in values if isinstance(v, str))
