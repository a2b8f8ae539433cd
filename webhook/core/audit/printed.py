"""What `policy-webhook report` prints (SPEC §8.6): the reports the leader would keep, computed
afresh, for one namespace or all; as a versioned document (`-o json|yaml`, docs/cli.md) or as
a table for people. Pure: the shell reads the state and writes the text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from webhook.core.audit import reports
from webhook.core.audit.findings import PolicyAudit
from webhook.core.audit.kind_findings import KindAudit
from webhook.core.model import meta

API_VERSION = "cli.policy-attachment.dev/v1"
KIND = "Report"
COLUMNS = ("NAMESPACE", "POLICY", "RULE", "RESULT", "FIELD", "MESSAGE")


def reports_of(
    audits: Mapping[Any, PolicyAudit],
    kind_audits: Sequence[KindAudit],
    *,
    namespace: str | None,
) -> list[dict[str, Any]]:
    """The report of `namespace` (None: of every namespace holding policies, and the
    cluster's), as the leader would write them, without timestamps."""
    by_namespace: dict[str, list[PolicyAudit]] = {}
    for audit in audits.values():
        by_namespace.setdefault(audit.key.namespace, []).append(audit)
    wanted = sorted({*by_namespace, ""}) if namespace is None else [namespace]
    out = []
    kind_results = reports.kind_results(kind_audits)
    for ns in wanted:
        results = reports.namespace_results(ns, by_namespace.get(ns, ()), kind_results)
        if ns in by_namespace or (not ns and results):
            out.append(reports.report(ns, results, now=None, limit=None))
    return out


def failed(documents: Iterable[Mapping[str, Any]]) -> bool:
    """Whether any result is at `fail` (exit code 1)."""
    return any(doc["summary"]["fail"] for doc in documents)


def document(documents: Sequence[Mapping[str, Any]], policies: int) -> dict[str, Any]:
    """The `-o json|yaml` document: every report whole, and the counts of them all."""
    totals = {key: sum(doc["summary"][key] for doc in documents) for key in reports.SUMMARY_KEYS}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "summary": {"policies": policies, "reports": len(documents), **totals},
        "reports": list(documents),
    }


def table(documents: Sequence[Mapping[str, Any]], policies: int) -> list[str]:
    """One row per result under aligned headers (none when there is nothing to show), then a
    line of counts."""
    rows = [
        (
            meta.namespace(doc) or "(cluster)",
            _object(result["resources"][0]),
            result["policy"],
            result["result"],
            result["properties"].get("field", ""),
            result["message"],
        )
        for doc in documents
        for result in doc["results"]
    ]
    lines = []
    if rows:
        widths = [max(len(row[i]) for row in (COLUMNS, *rows)) for i in range(len(COLUMNS) - 1)]
        for row in (COLUMNS, *rows):
            cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
            lines.append("  ".join([*cells, row[-1]]))
    lines.append(_counts(documents, policies))
    return lines


def _object(resource: Mapping[str, Any]) -> str:
    return f"{resource.get('kind', '')}/{resource.get('name', '')}"


def _counts(documents: Sequence[Mapping[str, Any]], policies: int) -> str:
    fail = sum(doc["summary"]["fail"] for doc in documents)
    warn = sum(doc["summary"]["warn"] for doc in documents)
    where = _plural(len(documents), "report", "reports")
    return f"{_plural(policies, 'policy', 'policies')}, {where}: {fail} fail, {warn} warn"


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"
