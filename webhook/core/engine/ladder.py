"""Where an object stands among the policies, before any policy's values are read.

An object's contexts (SPEC §4) grouped by the rungs of each that hold a policy: 10,000
contexts of a busy Service meet policies at a handful of distinct rung sets, and contexts that
meet the same ones get one answer. With the policy kinds that reach the object and its
sections, that is all `effective` needs before it reads a single value — and it outlives an
edit of a policy's values, so a store keeps it per object (`memo.LadderMemo`).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from webhook.core.engine import hierarchy
from webhook.core.engine.attachment import Attachments
from webhook.core.engine.hierarchy import Context, Rung
from webhook.core.engine.memo import engine_of, ladders_of, moved_attachments
from webhook.core.model import kinds
from webhook.core.model.refs import GroupKind, ObjectKey
from webhook.core.state.store import ClusterView

# The rungs of a context that hold a policy, and the indices of the contexts with just those.
RungGroup = tuple[tuple[Rung, ...], Sequence[int]]


class Ladder(NamedTuple):
    """One object's contexts, their printed paths, and the contexts grouped by the rungs of
    each that hold a policy (`rung_groups`, each rung set once). Pairs, not a mapping: no
    reader looks a rung set up, and a kept ladder's pairs are shared between objects."""

    contexts: tuple[Context, ...]
    paths: tuple[tuple[str, ...], ...]
    rung_groups: tuple[RungGroup, ...]


class Reached(NamedTuple):
    """What reaches an object: its ladder, the policy kinds met on it (sorted), its sections.

    The ladder's fields are held here, not a `Ladder` of its own: a store keeps one of these
    per annotated object, and a second tuple each was 64 bytes per object (docs/performance.md,
    *Choices*). `ladder` makes one when asked."""

    contexts: tuple[Context, ...]
    paths: tuple[tuple[str, ...], ...]
    rung_groups: tuple[RungGroup, ...]
    kinds: tuple[GroupKind, ...]
    sections: frozenset[str]

    @property
    def ladder(self) -> Ladder:
        return Ladder(self.contexts, self.paths, self.rung_groups)


def reached(
    key: ObjectKey,
    obj: Mapping[str, Any],
    view: ClusterView,
    attachments: Attachments,
    *,
    with_kinds: bool = True,
) -> Reached:
    """The object's standing, kept per object while the store's structure and the places
    policies attach to hold (a store's ladder memo); on an overlay that only moves policies (a
    policy under review), made from its base's; computed afresh on any other view.

    `with_kinds=False`: a caller that asks about one kind only (an impact preview) needs no
    list of the kinds met, and on an overlay of policies none is made (`kinds` is empty there:
    a tenth of the preview's "after" half was that list)."""
    return Standings(view, attachments, with_kinds=with_kinds).of(key, obj)


class Standings:
    """`reached` for any number of objects of one view in one state: what it asks of the view
    itself (its ladder memo; for an overlay of policies, its base and the keys they move) is
    asked once, not for each of an impact preview's objects."""

    __slots__ = ("_attachments", "_below", "_memo", "_moved", "_view", "_with_kinds")

    def __init__(self, view: ClusterView, attachments: Attachments, *, with_kinds: bool) -> None:
        self._view = view
        self._attachments = attachments
        self._with_kinds = with_kinds
        self._memo = ladders_of(view)
        self._below: Standings | None = None  # the base's, for an overlay that moves policies
        self._moved: frozenset[ObjectKey] = frozenset()
        if self._memo is None:
            moves = moved_attachments(view)
            if moves is not None:
                base, self._moved = moves
                self._below = Standings(base, Attachments(base, engine_of(base)), with_kinds=True)

    def of(self, key: ObjectKey, obj: Mapping[str, Any]) -> Reached:
        memo = self._memo if (key.group, key.kind) in kinds.ANNOTATED_KINDS else None
        found = memo.reached.get(key) if memo is not None else None
        if found is None:
            attachments = self._attachments
            if self._below is not None:
                below = self._below.of(key, obj)
                return _moved(key, below, self._moved, attachments, self._with_kinds)
            ladder = ladder_of(hierarchy.kept_contexts(key, self._view), attachments)
            found = Reached(
                *ladder,
                _kinds_met(key, ladder, attachments),
                kinds.section_names(key.group_kind, obj),
            )
            if memo is not None:
                found = memo.reached[key] = _with_shared_parts(found, memo.shared)
        return found


def _moved(
    key: ObjectKey,
    base: Reached,
    moved: frozenset[ObjectKey],
    attachments: Attachments,
    with_kinds: bool,
) -> Reached:
    """The standing on an overlay that only moves policies, from the base's: the same
    contexts, and the same rungs holding policies in each context that passes no key of
    `moved`; only at the keys of `moved` are the overlay's attachments asked. A route policy
    under review touches few of a busy Service's contexts (measured: its preview's "after"
    half about 0.85 times as long as with every rung of every context asked)."""
    if not moved:
        return base
    contexts = base.contexts
    passing = [
        i for i, context in enumerate(contexts) if not moved.isdisjoint(map(_KEY_OF, context))
    ]
    before: list[tuple[Rung, ...]] = [()] * len(contexts)
    for rungs, indices in base.rung_groups:
        for i in indices:
            before[i] = rungs
    for i in passing:
        kept = before[i]
        before[i] = tuple(
            r for r in contexts[i] if (attachments.at(r) if r.key in moved else r in kept)
        )
    by_policy_rungs: dict[tuple[Rung, ...], list[int]] = {}
    for i, rungs in enumerate(before):
        by_policy_rungs.setdefault(rungs, []).append(i)
    ladder = Ladder(contexts, base.paths, tuple(by_policy_rungs.items()))
    met = _kinds_met(key, ladder, attachments) if with_kinds else ()
    return Reached(*ladder, met, base.sections)


_KEY_OF = operator.itemgetter(0)  # a Rung's key, read in C (`_moved` asks it of every rung)


def _kinds_met(key: ObjectKey, ladder: Ladder, attachments: Attachments) -> tuple[GroupKind, ...]:
    """The policy kinds at the ladder's rungs and on the object itself, sorted."""
    met = kinds_at(ladder, attachments) | {p.key.group_kind for p, _ in attachments.on(key)}
    return tuple(sorted(met))


def ladder_of(contexts: Sequence[Context], attachments: Attachments) -> Ladder:
    """`contexts` grouped by the rungs of each that hold a policy, with their printed paths.

    Each path is printed anew: a context ends at its object, so no other object's ladder
    asks for it, and a kept ladder keeps it. (A table of every context's path, to print each
    once per state, held one entry per context for the rare ladder made again: at 8x the
    default scale a 21 MB table, to save printing a few paths per object after a policy
    moved; docs/performance.md, *Choices*.)"""
    by_policy_rungs: dict[tuple[Rung, ...], list[int]] = {}
    for i, context in enumerate(contexts):
        rungs = tuple(rung for rung in context if attachments.at(rung))
        by_policy_rungs.setdefault(rungs, []).append(i)
    return Ladder(
        tuple(contexts),  # a tuple given is kept as it is (`hierarchy.kept_contexts`)
        hierarchy.paths_of(contexts),
        tuple(by_policy_rungs.items()),
    )


def kinds_at(ladder: Ladder, attachments: Attachments) -> set[GroupKind]:
    """The policy kinds met at the rungs of the ladder's contexts."""
    met: set[GroupKind] = set()
    for rung in {r for rungs, _ in ladder.rung_groups for r in rungs}:
        met.update(attachments.at(rung))
    return met


def _with_shared_parts(found: Reached, shared: dict[Any, Any]) -> Reached:
    """`found` as kept for later states: equal tuples of rung groups (and the rung tuples and
    index tuples in them), kind lists and section-name sets shared between objects (a handful
    of distinct ones among thousands: at the benchmark's default scale, 105 distinct sets of
    section names among 15,259, and 837 distinct tuples of indices among 39,231). What is
    kept is what every full garbage collection walks, so it is kept small
    (docs/performance.md). A (rungs, indices) pair itself is not looked up: at 8x the default
    scale 161,186 of 227,034 distinct pairs were one object's, and their entries in the table
    held more than the equal pairs they saved."""
    kept: list[RungGroup] = []
    for rungs, indices in found.rung_groups:
        ix = tuple(indices)
        kept.append((shared.setdefault(rungs, rungs), shared.setdefault(ix, ix)))
    groups = tuple(kept)
    return Reached(
        found.contexts,
        found.paths,
        shared.setdefault(groups, groups),
        shared.setdefault(found.kinds, found.kinds),
        shared.setdefault(found.sections, found.sections),
    )
