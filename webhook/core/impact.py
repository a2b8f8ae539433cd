"""Conflict and impact findings that need the precedence engine (SPEC §2.3). STUB."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.findings import Finding
from webhook.core.refs import GroupKind
from webhook.core.settings import Settings
from webhook.core.store import ClusterView


def policy_findings(
    obj: Mapping[str, Any],
    gk: GroupKind,
    *,
    view: ClusterView,
    settings: Settings,
    old: Mapping[str, Any] | None,
) -> list[Finding]:
    return []


def delete_findings(
    old: Mapping[str, Any], gk: GroupKind, *, view: ClusterView, settings: Settings
) -> list[Finding]:
    return []
