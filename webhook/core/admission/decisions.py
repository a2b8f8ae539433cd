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
from webhook.core.rules.findings import Outcome, Verdict, one_line

DecisionVerdict = Outcome  # SPEC §8.1 `verdict`
LogDecisions = Literal["denied", "warned", "all", "none"]
LOG_DECISIONS: tuple[LogDecisions, ...] = ("denied", "warned", "all", "none")
DEFAULT_LOG_DECISIONS: LogDecisions = "warned"

# SPEC §8.1: denials at WARNING, warnings at INFO, clean allows at DEBUG. The numbers are the
# standard library's logging levels (DEBUG 10, INFO 20, WARNING 30), fixed since Python 2.3.
DEBUG, INFO, WARNING = 10, 20, 30
LEVELS: Mapping[DecisionVerdict, int] = {"denied": WARNING, "warned": INFO, "allowed": DEBUG}
# `--log-decisions`: the least level written. `none` is above every level logging has.
THRESHOLDS: Mapping[LogDecisions, int] = {"denied": WARNING, "warned": INFO, "all": DEBUG,
                                          "none": 100}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Cause:
    """One finding the user was told about: a denial or a warning."""

    rule: str
    field: str
    message: str  # without the `[PA-XXX]` prefix: `rule` carries it


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
    verdict: DecisionVerdict
    rules: tuple[str, ...]
    causes: tuple[Cause, ...]  # denials first, then warnings; () for a clean allow

    @property
    def group_kind(self) -> GroupKind:
        return GroupKind(self.group, self.kind)

    @property
    def kind_group(self) -> str:
        """`Kind.group`, or `Kind` alone for the core group (as `kubectl get` spells it)."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def is_policy_write(self) -> bool:
        """Whether the object is a policy (not a target whose delete PA-C05 comments on)."""
        return self.group_kind not in kinds.NEVER_POLICIES


def verdict_name(verdict: Verdict) -> DecisionVerdict:
    """`denied`, `warned` or `allowed`: `Verdict.outcome`, which the audit annotations share."""
    return verdict.outcome


def logged(verdict: DecisionVerdict, log_decisions: LogDecisions) -> bool:
    """Whether `--log-decisions` writes a decision with this verdict."""
    return LEVELS[verdict] >= THRESHOLDS[log_decisions]


def decision_of(
    request: Request, verdict: Verdict, name: DecisionVerdict | None = None
) -> Decision:
    """The decision `verdict` made on `request`; `name` is `verdict_name(verdict)` when the
    caller has it already."""
    kind = request["kind"]
    obj = request.get("object") or request.get("oldObject")
    user = request.get("userInfo") or {}
    name = name or verdict_name(verdict)
    return Decision(
        uid=request["uid"],
        operation=request["operation"],
        dry_run=request.get("dryRun") is True,
        group=kind.get("group", ""),
        version=kind.get("version", ""),
        kind=kind["kind"],
        namespace=request.get("namespace") or meta.namespace(obj),
        name=request.get("name") or meta.name(obj),
        object_uid=_uid_of(request),
        user=_text(user.get("username")),
        groups=_texts(user.get("groups")),
        verdict=name,
        rules=verdict.rule_ids,
        causes=_causes(verdict) if name != "allowed" else (),
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
            {"rule": c.rule, "field": c.field, "message": c.message} for c in decision.causes
        ]
    fields["latencyMs"] = latency_ms
    return fields


def request_fields(request: Request, verdict: str, latency_ms: float) -> dict[str, Any]:
    """The §8.1 fields that mean something without a judged verdict: a `/mutate` decision
    (`patched` or `allowed`), an internal error."""
    kind = request["kind"]
    obj = request.get("object") or request.get("oldObject")
    user = request.get("userInfo") or {}
    group = kind.get("group", "")
    return {
        "uid": request["uid"],
        "operation": request["operation"],
        "dryRun": request.get("dryRun") is True,
        "kind": f"{kind['kind']}.{group}" if group else kind["kind"],
        "namespace": request.get("namespace") or meta.namespace(obj),
        "name": request.get("name") or meta.name(obj),
        "user": _text(user.get("username")),
        "verdict": verdict,
        "latencyMs": latency_ms,
    }


def _causes(verdict: Verdict) -> tuple[Cause, ...]:
    judged = [j for j in verdict.judged if j.action in ("deny", "warn")]
    judged.sort(key=lambda j: j.action != "deny")  # stable: denials first, each in rule order
    return tuple(
        Cause(j.finding.rule_id, one_line(j.finding.field), one_line(j.finding.message))
        for j in judged
    )


def _uid_of(request: Request) -> str:
    """The stored object's uid (UPDATE, DELETE). A CREATE's object already carries the uid the
    API server chose for it, but a denied one never exists: that uid names nothing."""
    uid = meta.metadata(request.get("oldObject")).get("uid")
    return uid if isinstance(uid, str) else ""


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _texts(values: object) -> tuple[str, ...]:
    if type(values) is list and all(type(v) is str for v in values):
        return tuple(values)  # what the API server sends
    if not isinstance(values, Sequence) or isinstance(values, str):
        return ()
    return tuple(v for v in values if isinstance(v, str))
