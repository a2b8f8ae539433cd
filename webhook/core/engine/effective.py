"""The precedence engine (SPEC §5): per policy kind and per context, what applies and why.

Pure and deterministic: inputs are a view and an object key, outputs are frozen values; the
order in which the view learned its objects never matters (policies are always taken in
`order_key` order, contexts in a fixed order). Kinds never interact.

Decisions where SPEC §5 is silent (docs/decisions.md):
- A policy found at two rungs of one context (a Namespace policy when the Gateway and the
  route share that Namespace) counts at each: as an override at the higher rung, as a
  default at the lower one.
- A cross-namespace target counts only with a ReferenceGrant (never with `crossNamespace:
  deny`); a Namespace target counts only for the policy's own Namespace (PA-T03/T04).
- A kind of unknown class is Direct when every policy of it that reaches the object is, else
  Inherited, with wrapper-less policies taken as defaults (their spec proper).
- Direct kinds ignore the hierarchy: their contexts are the object and each of its sections
  a policy targets, whether or not the object is attached anywhere.
- `atomic` with a fieldMap: the object's own values still beat the winning default, field by
  field. An object value's source has `policy: null`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from webhook.core.engine import hierarchy
from webhook.core.engine import memo as derived
from webhook.core.engine.board import (
    WHOLE,
    Board,
    Claim,
    ContextResult,
    Loser,
    Source,
    StanzaName,
    reason,
    tie_why,
)
from webhook.core.engine.hierarchy import Context, Rung
from webhook.core.model import kinds, leaves
from webhook.core.model.policy import Policy
from webhook.core.model.profiles import KindProfile, Merge, PolicyClass
from webhook.core.model.refs import GroupKind, ObjectKey
from webhook.core.state import grants
from webhook.core.state.overlay import OverlayView
from webhook.core.state.store import ClusterView


class ResultGroup(NamedTuple):
    """Contexts of one object that share one answer: those meeting the same policies."""

    effective: Mapping[str, Any]
    sources: Mapping[str, Source]
    losers: tuple[Loser, ...]
    indices: tuple[int, ...]  # into the KindResult's `all_contexts`, ascending


class Ladder(NamedTuple):
    """One object's contexts, their printed paths, and which contexts meet policies at the
    same rungs (`by_hot`: the rungs holding any policy → indices of the contexts)."""

    contexts: tuple[Context, ...]
    paths: tuple[tuple[str, ...], ...]
    by_hot: Mapping[tuple[Rung, ...], Sequence[int]]


@dataclass(frozen=True, slots=True)
class KindResult:
    """One policy kind's answer for one object: contexts grouped by answer, in a fixed order.

    Kept grouped because the summary is (an object with 2,000 contexts has a handful of
    answers); `contexts` spells it out per context, for `explain` and the impact preview.
    """

    group_kind: GroupKind
    policy_class: PolicyClass
    merge: Merge
    groups: tuple[ResultGroup, ...]  # ordered by their first context
    policies: tuple[str, ...]  # every policy of the kind that reaches a context, sorted
    all_contexts: tuple[Context, ...]  # in `hierarchy.sort_contexts` order
    all_paths: tuple[tuple[str, ...], ...]

    @property
    def contexts(self) -> tuple[ContextResult, ...]:
        """One result per context, in context order."""
        out: list[ContextResult | None] = [None] * len(self.all_contexts)
        for group in self.groups:
            for i in group.indices:
                out[i] = ContextResult(
                    self.all_contexts[i],
                    self.all_paths[i],
                    group.effective,
                    group.sources,
                    group.losers,
                )
        return tuple(r for r in out if r is not None)


def compute(
    key: ObjectKey,
    view: ClusterView,
    *,
    incoming: Mapping[str, Any] | None = None,
    with_losers: bool = True,
    only: GroupKind | None = None,
) -> list[KindResult]:
    """The effective policies of one object, one result per policy kind that reaches it.

    `only` limits the work to one policy kind (kinds never interact, SPEC §5): the impact
    preview of a policy change needs no other.
    """
    if incoming is not None:
        view = OverlayView(view, upserts=[incoming])
    obj = view.get(key)
    if obj is None:
        return []
    memo = derived.engine_memo(view)
    structure = derived.structure_memo(view)
    finder = _Finder(view, memo, structure.paths if structure is not None else {})
    placement = _placement(key, obj, view, finder)
    out = []
    for gk in placement.kinds:
        if only is not None and gk != only:
            continue
        engine = _KindEngine(view.profile(gk), finder, with_losers, memo)
        result = engine.run(key, obj, placement.ladder, placement.sections)
        if result is not None:
            out.append(result)
    return out


class Placement(NamedTuple):
    """Where an object sits among the policies, before any policy's values are read: its
    ladder, the policy kinds that reach it, its sections.

    Kept per object (`derived.LadderMemo`) while the hierarchy holds and no policy moves: an
    edit of one policy's values then recomputes its fan-out from here, the ladder of every
    object it reaches already known (that fan-out took 0.73x the time, measured).
    """

    ladder: Ladder
    kinds: tuple[GroupKind, ...]  # sorted
    sections: frozenset[str]


def _placement(
    key: ObjectKey, obj: Mapping[str, Any], view: ClusterView, finder: _Finder
) -> Placement:
    ladders = derived.ladder_memo(view) if key.group_kind in kinds.ANNOTATED_KINDS else None
    found: Placement | None = ladders.ladders.get(key) if ladders is not None else None
    if found is None:
        # Per context, only its rungs that hold a policy matter; many contexts share those.
        ladder = finder.ladder(hierarchy.contexts_of(key, view))
        reached = {p.key.group_kind for p, _ in finder.attached(key)}
        for rung in {r for rungs in ladder.by_hot for r in rungs}:
            reached.update(finder.policies_at(rung))
        found = Placement(ladder, tuple(sorted(reached)), kinds.section_names(key.group_kind, obj))
        if ladders is not None:
            found = ladders.ladders[key] = _kept(found, ladders.shared)
    return found


def _kept(placement: Placement, shared: dict[Any, Any]) -> Placement:
    """The placement as kept for later states: equal rung tuples and kind lists shared between
    objects (a handful of distinct ones among thousands), indices as tuples. Kept objects are
    what every full garbage collection walks: as first built, they added 28% to the tracked
    objects at the benchmark's default size, and made cold summaries 1.1x as slow; 14% kept
    this way, and no slower."""
    ladder = placement.ladder
    by_hot = {shared.setdefault(hot, hot): tuple(ix) for hot, ix in ladder.by_hot.items()}
    return Placement(
        Ladder(ladder.contexts, ladder.paths, by_hot),
        shared.setdefault(placement.kinds, placement.kinds),
        placement.sections,
    )


class _Finder:
    """Policies attached to keys and rungs, memoised for the view's state (`derived`)."""

    def __init__(
        self, view: ClusterView, memo: derived.EngineMemo, paths: dict[Any, tuple[str, ...]]
    ) -> None:
        self.view = view
        self._memo: dict[ObjectKey, list[tuple[Policy, str | None]]] = memo.attached
        self._by_rung: dict[Rung, dict[GroupKind, list[Policy]]] = memo.by_rung
        self._paths = paths

    def policies_at(self, rung: Rung) -> Mapping[GroupKind, list[Policy]]:
        """The policies attached exactly at `rung` (its object and section), by kind."""
        found = self._by_rung.get(rung)
        if found is None:
            found = {}
            for policy, section in self.attached(rung.key):
                if section == rung.section:
                    found.setdefault(policy.key.group_kind, []).append(policy)
            self._by_rung[rung] = found
        return found

    def hot(self, context: Context) -> tuple[Rung, ...]:
        """The rungs of `context` where some policy is attached."""
        return tuple(rung for rung in context if self.policies_at(rung))

    def ladder(self, contexts: Sequence[Context]) -> Ladder:
        by_hot: dict[tuple[Rung, ...], list[int]] = {}
        for i, ctx in enumerate(contexts):
            by_hot.setdefault(self.hot(ctx), []).append(i)
        return Ladder(tuple(contexts), tuple(self.path_of(ctx) for ctx in contexts), by_hot)

    def path_of(self, context: Context) -> tuple[str, ...]:
        found = self._paths.get(context)
        if found is None:
            found = self._paths[context] = hierarchy.path_of(context)
        return found

    def attached(self, key: ObjectKey) -> list[tuple[Policy, str | None]]:
        if key not in self._memo:
            obj = self.view.get(key)
            found = {
                (p.key, section): (p, section)
                for p in self.view.policies_targeting(key)
                if self._counts(p, key)
                for section in p.sections_on(key, obj)
            }
            self._memo[key] = sorted(found.values(), key=lambda ps: (ps[0].order_key, ps[1] or ""))
        return self._memo[key]

    def _counts(self, policy: Policy, target: ObjectKey) -> bool:
        profile = self.view.profile(policy.key.group_kind)
        if target.group_kind not in profile.allowed_targets:
            return False  # PA-T01: the webhook does not show a policy's effect there
        namespace = policy.key.namespace
        if not namespace:
            return True  # a cluster-scoped policy: no namespace to cross from
        if target.group_kind == kinds.NAMESPACE:
            return target.name == namespace
        if not target.namespace or target.namespace == namespace:
            return True
        if profile.cross_namespace == "deny":
            return False
        return grants.reference_granted(policy.key.group_kind, namespace, target, self.view)


class _KindEngine:
    """One policy kind's rules: Direct (§5.1), Inherited `patch` (§5.2) or `atomic` (§5.5)."""

    def __init__(
        self, profile: KindProfile, finder: _Finder, with_losers: bool, memo: derived.EngineMemo
    ) -> None:
        self.profile = profile
        self.gk = profile.group_kind
        self.finder = finder
        self.with_losers = with_losers
        self._leaves: dict[tuple[ObjectKey, str], dict[leaves.Path, Any]] = memo.leaves
        self._boards: dict[Any, ContextResult] = memo.boards
        self._attached: dict[ObjectKey, list[tuple[Policy, str | None]]] = {}

    def attached(self, key: ObjectKey) -> list[tuple[Policy, str | None]]:
        found = self._attached.get(key)
        if found is None:
            found = [(p, s) for p, s in self.finder.attached(key) if p.key.group_kind == self.gk]
            self._attached[key] = found
        return found

    def run(
        self,
        key: ObjectKey,
        obj: Mapping[str, Any],
        ladder: Ladder,
        sections: frozenset[str],
    ) -> KindResult | None:
        own = self.attached(key)
        targeted = {s for _, s in own if s is not None and s in sections}
        klass = self.profile.policy_class or self._inferred_class(key, ladder.contexts)
        groups: list[ResultGroup]
        if klass == "Direct":
            own = [(p, s) for p, s in own if s is None or s in sections]
            if not own:
                return None
            direct = [(Rung(key),), *((Rung(key, s),) for s in sorted(targeted))]
            ladder = Ladder(tuple(direct), tuple(hierarchy.path_of(c) for c in direct), {})
            results = [self._direct(ctx[-1], own, ctx) for ctx in direct]
            groups = [
                ResultGroup(r.effective, r.sources, r.losers, (i,)) for i, r in enumerate(results)
            ]
            refs = {p.ref for p, _ in own}
        else:
            if targeted:  # variants ending at a targeted section: their hot rungs differ
                ladder = self.finder.ladder(
                    hierarchy.with_sections(list(ladder.contexts), key, targeted)
                )
            levels = {rungs: self._levels(rungs) for rungs in ladder.by_hot}
            refs = {p.ref for lv in levels.values() for _, ps in lv for p in ps}
            if not refs:
                return None
            from_object = self._object_leaves(key, obj)
            groups = self._inherited_all(ladder, levels, from_object, key.display())
        return KindResult(
            self.gk,
            klass,
            self.profile.merge,
            tuple(groups),
            tuple(sorted(refs)),
            ladder.contexts,
            ladder.paths,
        )

    def _inferred_class(self, key: ObjectKey, contexts: Sequence[Context]) -> PolicyClass:
        keys = {key, *(r.key for ctx in contexts for r in ctx)}
        found = (p for k in keys for p, _ in self.attached(k))
        return "Inherited" if any(p.policy_class == "Inherited" for p in found) else "Direct"

    # --- leaves of one stanza ----------------------------------------------------------------

    def stanza_leaves(self, policy: Policy, stanza: StanzaName) -> dict[leaves.Path, Any]:
        memo_key = (policy.key, stanza)
        if memo_key not in self._leaves:
            value, schema = self._stanza(policy, stanza)
            self._leaves[memo_key] = leaves.leaves(value, schema) if value else {}
        return self._leaves[memo_key]

    def _stanza(
        self, policy: Policy, stanza: StanzaName
    ) -> tuple[Mapping[str, Any] | None, leaves.Schema]:
        spec_schema = self.profile.spec_schema
        if stanza == "direct":
            return policy.spec_proper, spec_schema
        value = policy.override if stanza == "override" else policy.default
        if stanza == "default" and value is None and policy.policy_class == "Direct":
            value = policy.spec_proper  # an unknown-class kind run as Inherited: implicit default
        if value is None:
            return None, None
        if policy.override is None and value == policy.spec_proper:
            return value, spec_schema  # the implicit form: spec-proper fields, spec's schema
        return value, stanza_schema(spec_schema, stanza)

    def _object_leaves(self, key: ObjectKey, obj: Mapping[str, Any]) -> dict[leaves.Path, Any]:
        """SPEC §5.9: the target object's own values at the kind's fieldMap pointers."""
        out: dict[leaves.Path, Any] = {}
        schema = stanza_schema(self.profile.spec_schema, "default")
        for src, dst in sorted(self.profile.field_map.items()):
            value = pointer_get(obj, dst)
            if leaves.is_unset(value):
                continue
            for segment in reversed(split_pointer(src)):
                value = {segment: value}
            out.update(leaves.leaves(value, schema))
        return out

    # --- the three strategies ----------------------------------------------------------------

    def _board(self) -> Board:
        return Board(losers={} if self.with_losers else None)

    def _direct(
        self, rung: Rung, own: Sequence[tuple[Policy, str | None]], ctx: Context
    ) -> ContextResult:
        """SPEC §5.1, §4.5: only this object's (or section's) policies; the winner applies whole."""
        board = self._board()
        candidates = list({p.key: p for p, s in own if s == rung.section}.values())
        at = rung.display()
        for i, policy in enumerate(candidates):
            claim = Claim(Source(policy.ref, "direct", at), policy)
            if i == 0:
                for path, value in self.stanza_leaves(policy, "direct").items():
                    board.offer(path, value, claim)
            else:
                winner = candidates[0]
                board.lose(
                    claim, WHOLE, f"conflicted: {winner.ref} wins ({tie_why(policy, winner)})"
                )
        return board.result(ctx)

    def _levels(self, rungs: tuple[Rung, ...]) -> list[tuple[Rung, list[Policy]]]:
        """The rungs holding a policy of this kind, with those policies, root first."""
        found = []
        for rung in rungs:
            policies = self.finder.policies_at(rung).get(self.gk)
            if policies:
                found.append((rung, policies))
        return found

    def _inherited_all(
        self,
        ladder: Ladder,
        levels: Mapping[tuple[Rung, ...], list[tuple[Rung, list[Policy]]]],
        from_object: Mapping[leaves.Path, Any],
        object_at: str,
    ) -> list[ResultGroup]:
        """Contexts that meet the same policies at the same rungs share one computation:
        a Service behind 10,000 routes of one Gateway has 10,000 contexts and one answer.

        Shared beyond this object too (`derived`): while the state holds, a rung's policies are
        fixed, so the rungs holding this kind's policies name the board, for every object whose
        contexts meet them — unless the object's own values take part (SPEC §5.9).
        """
        memo: dict[Any, ContextResult] = self._boards if not from_object else {}
        by_signature: dict[tuple[Rung, ...], tuple[ContextResult, list[int]]] = {}
        for rungs, indices in ladder.by_hot.items():
            lv = levels[rungs]
            signature = tuple(rung for rung, _ in lv)
            entry = by_signature.get(signature)
            if entry is None:
                memo_key = (self.gk, self.with_losers, signature)
                done = memo.get(memo_key)
                if done is None:
                    ctx = ladder.contexts[indices[0]]
                    done = memo[memo_key] = self._inherited(ctx, lv, from_object, object_at)
                entry = by_signature[signature] = (done, [])
            entry[1].extend(indices)
        groups = [
            ResultGroup(done.effective, done.sources, done.losers, tuple(sorted(indices)))
            for done, indices in by_signature.values()
        ]
        groups.sort(key=lambda g: g.indices[0])
        return groups

    def _inherited(
        self,
        ctx: Context,
        levels: list[tuple[Rung, list[Policy]]],
        from_object: Mapping[leaves.Path, Any],
        object_at: str,
    ) -> ContextResult:
        """SPEC §5.2 and §1.7, one stanza at a time in the order they get to choose:
        overrides root first, then the object's own values, then defaults target first.

        Each stanza meets what is already claimed by its strategy: `merge` claims the fields
        still free; an `atomic` override claims its fields and leaves everything more specific
        unset; an `atomic` default applies only where nothing is claimed yet — or where every
        claim so far comes from a policy that merges onto less specific ones (Envoy Gateway's
        `mergeType`) — and is skipped whole otherwise. A kind's `merge: atomic` (§5.5) makes
        every stanza of it atomic unless the stanza selects its own strategy.
        """
        board = self._board()
        obj_claim = Claim(Source(None, "object", object_at), None)
        offers = self._offers(levels)
        locked_by: Claim | None = None  # the atomic override that replaced everything below
        for claim, found in offers["override"]:  # §5.2a: root first
            if locked_by is not None:
                self._skip(board, claim, locked_by, "replaced whole by an atomic override")
                continue
            for path, value in found.items():
                board.offer(path, value, claim)
            if self._strategy(claim, "override") == "atomic":
                locked_by = claim
        if locked_by is not None:
            for claim, _ in offers["default"]:
                self._skip(board, claim, locked_by, "replaced whole by an atomic override")
            return board.result(ctx)
        for path, value in from_object.items():  # §5.2b
            board.offer(path, value, obj_claim)
        # Whether an atomic default may still apply: nothing claimed yet, or only by policies
        # that merge onto less specific ones.
        open_below = not board.won
        for claim, found in offers["default"]:  # §5.2c: target first
            if self._strategy(claim, "default") == "atomic" and not open_below:
                self._skip(board, claim, _first_claim(board), "atomic: skipped whole")
                continue
            for path, value in found.items():
                board.offer(path, value, claim)
            open_below = (
                open_below and claim.policy is not None and (claim.policy.merges_onto_less_specific)
            )
        return board.result(ctx)

    def _strategy(self, claim: Claim, stanza: Literal["override", "default"]) -> str:
        """The stanza's own selector (SPEC §1.7), else the kind's strategy."""
        assert claim.policy is not None
        own = claim.policy.strategy(stanza)
        if own is not None:
            return own
        return "atomic" if self.profile.merge == "atomic" else "merge"

    @staticmethod
    def _skip(board: Board, claim: Claim, winner: Claim | None, why: str) -> None:
        """A whole stanza that does not apply here, recorded against what took its place."""
        if winner is None or claim.policy is winner.policy:
            return
        board.lose(claim, WHOLE, f"{reason(claim, winner)} ({why})", by=winner.source)

    def _offers(
        self, levels: list[tuple[Rung, list[Policy]]]
    ) -> dict[str, list[tuple[Claim, dict[leaves.Path, Any]]]]:
        """Each policy's stanzas in the order they get to choose: overrides root-first, defaults
        target-first; within a level, SPEC §4.4 order."""
        offers: dict[str, list[tuple[Claim, dict[leaves.Path, Any]]]] = {
            "override": [],
            "default": [],
        }
        walks: tuple[
            tuple[Literal["override", "default"], list[tuple[Rung, list[Policy]]]], ...
        ] = (
            ("override", levels),
            ("default", levels[::-1]),
        )
        for stanza, walk in walks:
            for rung, policies in walk:
                for policy in policies:
                    found = self.stanza_leaves(policy, stanza)
                    if found:
                        source = Source(policy.ref, stanza, rung.display())
                        offers[stanza].append((Claim(source, policy), found))
        return offers


def _first_claim(board: Board) -> Claim | None:
    """The claim that took the board's first leaf: the most telling winner to name."""
    return next((claim for _, claim in board.won.values()), None)


def stanza_schema(spec_schema: leaves.Schema, stanza: str) -> leaves.Schema:
    """The schema of `default`/`override` (either spelling) inside the spec's schema."""
    props = spec_schema.get("properties") if spec_schema else None
    if not isinstance(props, Mapping):
        return None
    for name in (stanza, f"{stanza}s"):
        if isinstance(props.get(name), Mapping):
            found: Mapping[str, Any] = props[name]
            return found
    return None


def split_pointer(pointer: str) -> list[str]:
    """RFC 6901: `/a~1b/c` → ["a/b", "c"]."""
    return [part.replace("~1", "/").replace("~0", "~") for part in pointer.split("/")[1:]]


def pointer_get(obj: Any, pointer: str) -> Any:
    """The value at a JSON pointer, or None where there is none."""
    node = obj
    for part in split_pointer(pointer):
        if isinstance(node, Mapping):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node
