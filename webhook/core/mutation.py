"""The `/mutate` patch: our annotation only (SPEC §3.1). STUB."""

from __future__ import annotations

from typing import Any

from webhook.core.reviews import Request
from webhook.core.settings import Settings
from webhook.core.store import ClusterView


def annotation_patch(request: Request, *, view: ClusterView, settings: Settings) -> list[dict[str, Any]]:
    return []
