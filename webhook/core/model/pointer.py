"""JSON Pointers (RFC 6901): the one place that escapes, splits and follows them.

The annotation's `sources` are keyed by pointers into `effective`, a `fieldMap` maps pointers
to pointers, and the mutating webhook's JSON Patch names our annotation by one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def escape(segment: str) -> str:
    """One reference token: `~` → `~0` first, then `/` → `~1` (RFC 6901 §3)."""
    return segment.replace("~", "~0").replace("/", "~1")


def unescape(token: str) -> str:
    """`~1` → `/` first, then `~0` → `~` (RFC 6901 §4), so `~01` stays `~1`."""
    return token.replace("~1", "/").replace("~0", "~")


def join(segments: Iterable[str]) -> str:
    """`["a/b", "c"]` → `/a~1b/c`; no segments → `""` (the whole document)."""
    return "".join("/" + escape(segment) for segment in segments)


def split(pointer: str) -> list[str]:
    """`/a~1b/c` → `["a/b", "c"]`; `""` → `[]`."""
    return [unescape(token) for token in pointer.split("/")[1:]]


def resolve(document: Any, pointer: str) -> Any:
    """The value at `pointer`, or None where there is none (a missing key, an index past the
    end, a step into a scalar)."""
    node = document
    for token in split(pointer):
        if isinstance(node, Mapping):
            node = node.get(token)
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node
