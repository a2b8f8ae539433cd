"""Equal parts of many stored objects held once: a route's parents and backends, a Service's ports.

Decoded one by one, every object holds its own copies of what thousands of others hold alike:
the `parentRefs` of every route on one Gateway, the backendRef of every route sending to one
Service's port, the `ports` of Services made from one chart. `SharedParts.share` hands out the
equal part it was given before instead (hash-consing), so that such parts are held once.

Shared parts must never be changed in place. The store's objects never are (a write replaces
the object; `Store.move_version` copies what it changes), and `trim` makes the parts anew from
each decoded object before sharing them. Pure: no IO; the store owns its table and uses it from
one thread (the event loop's), as everything else it holds.
"""

from __future__ import annotations

import operator
import sys
from typing import Any, TypeVar

Part = TypeVar("Part", dict[str, Any], list[Any])

_PROBE = ("the sweep's probe",)  # a key no part has: parts are keyed by int


class SharedParts:
    """One object per distinct part (a dict or a list of scalars or of parts shared before).

    A part no stored object holds any more is dropped at the next sweep, when the table has
    doubled since the last one: what it holds stays in proportion to what the store holds.
    """

    def __init__(self, *, sweep_from: int = 4096) -> None:
        self._parts: dict[object, dict[str, Any] | list[Any]] = {}
        self._sweep_from = sweep_from
        self._sweep_at = sweep_from

    def share(self, part: Part) -> Part:
        """`part`, or the part equal to it kept before: same type, same keys in the same order,
        and members of the same type and value (strings, numbers, booleans, null) or the same
        object (a list or a map: a part shared before)."""
        flat = tuple(part.items()) if type(part) is dict else tuple(part)
        try:
            key = hash(flat)
        except TypeError:  # a member is a list or a map: members compared by identity
            key = hash(_identities(part))
            kept = self._parts.get(key)
            if kept is not None and _same_objects(kept, part):
                return kept  # type: ignore[return-value]  # _same_objects checked its type
        else:
            kept = self._parts.get(key)
            if kept is not None and _same_values(kept, flat, part):
                return kept  # type: ignore[return-value]  # _same_values checked its type
        if len(self._parts) >= self._sweep_at:
            self._sweep()
        self._parts[key] = part  # a collision replaces the part kept: still right, shared less
        return part

    def __len__(self) -> int:
        return len(self._parts)

    def _sweep(self) -> None:
        """Drop the parts only this table holds. Their count of references is the probe's, an
        object put in the table for the purpose, counted the same way (CPython's counts)."""
        self._parts[_PROBE] = [_PROBE]
        counts = {key: sys.getrefcount(part) for key, part in self._parts.items()}
        alone = counts.pop(_PROBE)
        del self._parts[_PROBE]
        self._parts = {key: self._parts[key] for key, count in counts.items() if count > alone}
        self._sweep_at = max(self._sweep_from, 2 * len(self._parts))


class NoSharing:
    """Parts as they are: for a trim whose result is compared and dropped (an object under
    review) or read once (`explain`'s snapshot of a cluster)."""

    def share(self, part: Part) -> Part:
        return part


def _identities(part: dict[str, Any] | list[Any]) -> tuple[Any, ...]:
    if type(part) is dict:
        return (*part, *map(id, part.values()))
    return tuple(map(id, part))


def _same_values(
    kept: dict[str, Any] | list[Any], flat: tuple[Any, ...], part: dict[str, Any] | list[Any]
) -> bool:
    """`kept` has the members of `flat`, `part`'s, in the same order and of the same types:
    equal by value is not enough, as `1 == 1.0 == True` are three different JSON values."""
    if type(kept) is not type(part):
        return False
    if type(part) is dict:
        assert type(kept) is dict
        return tuple(kept.items()) == flat and tuple(map(type, kept.values())) == tuple(
            map(type, part.values())
        )
    return tuple(kept) == flat and tuple(map(type, kept)) == tuple(map(type, part))


def _same_objects(kept: dict[str, Any] | list[Any], part: dict[str, Any] | list[Any]) -> bool:
    if type(kept) is not type(part) or len(kept) != len(part):
        return False
    if type(part) is dict:
        assert type(kept) is dict
        return tuple(kept) == tuple(part) and all(map(operator.is_, kept.values(), part.values()))
    return all(map(operator.is_, kept, part))


Sharing = SharedParts | NoSharing
