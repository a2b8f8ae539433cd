"""Labels and Kubernetes LabelSelectors, read defensively from any object.

One reading for every selector the project meets: `allowedRoutes` Namespace selectors and
a policy's `targetSelectors` (SPEC §1.7). Pure.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


def selector_matches(selector: object, labels: Mapping[str, Any]) -> bool:
    """A Kubernetes LabelSelector; a missing selector matches nothing, `{}` everything."""
    if not isinstance(selector, Mapping):
        return False
    match_labels = selector.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        return False
    if any(labels.get(k) != v for k, v in match_labels.items()):
        return False
    for expr in _items(selector.get("matchExpressions")):
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if not isinstance(key, str) or not isinstance(values, list):
            return False
        present = key in labels
        ok = {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }.get(op if isinstance(op, str) else "", False)
        if not ok:
            return False
    return True


def _items(value: object) -> Iterator[Mapping[str, Any]]:
    if isinstance(value, list):
        yield from (item for item in value if isinstance(item, Mapping))
