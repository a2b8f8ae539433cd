"""The precedence engine (SPEC §5): per policy kind and per context, what applies and why.

`compute` reads as the rule book does: find where the object stands (its contexts and the
policies along them, `ladder`), then for each policy kind that reaches it, either the Direct
rule (§5.1) or the Inherited one (§5.2 with the merge selectors of §1.7) on a board per
context (`board`). Pure and deterministic: policies are always taken in `order_key` order and
contexts in a fixed order, so the order in which the view learned its objects never matters.
Kinds never interact. What is shared between computations on one state (`memo`) stays out of
the rules' way: an `_Evaluation` holds it for one call.

Decisions where SPEC §5 is silent (docs/decisions.md):
- A policy found at two rungs of one context (a Namespace policy when the Gateway and the
  route share that Namespace) counts at each: as an override at the higher rung, as a
  default at the lower one.
- Where a policy counts is `attachment.counts_on` (PA-T01/T03/T04's facts).
- A kind of unknown class is Direct when every policy of it that reaches the object is, else
  Inherited, with wrapper-less policies taken as defaults (their spec proper).
- Direct kinds ignore the hierarchy: their contexts are the object and each of its sections
  a policy targets, whether or not the object is attached anywhere.
- An object value (§5.9) is a claim like any other: an atomic default meets it as it meets a
  more specific default. Its source has `policy: null`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from webhook.core.engine import hierarchy, ladder, memo
from webhook.core.engine.attachment import Attachments
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
from webhook.core.engine.ladder import Ladder
from webhook.core.engine.stanzas import StanzaLeaves, object_leaves
from webhook.core.model import kinds, leaves
from webhook.core.model.policy import Policy
from webhook.core.model.profiles import KindProfile, Merge, PolicyClass
from webhook.core.model.refs import GroupKind, ObjectKey
from webhook.core.state.overlay import OverlayView
from webhook.core.state.store import ClusterView

Stanza = Literal["override", "default"]
Offer = tuple[Claim, dict[leaves.Path, Any]]  # a stanza's claim and the leaves it offers


class ResultGroup(NamedTuple):
    """Contexts of one object that share one answer: those meeting the same policies."""

    effective: Mapping[str, Any]
    sources: Mapping[str, Source]
    losers: tuple[Loser, ...]
    indices: tuple[int, ...]  # into the KindResult's `all_contexts`, ascending


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

    `incoming` is the object as submitted (SPEC §3.1), in place of the stored one. `only`
    limits the work to one policy kind (kinds never interact, SPEC §5): the impact preview of
    a policy change needs no other.
    """
    if incoming is not None:
        view = OverlayView(view, upserts=[incoming])
    obj = view.get(key)
    if obj is None:
        return []
    evaluation = _Evaluation.of(view, with_losers)
    standing = ladder.reached(key, obj, view, evaluation.attachments, with_kinds=only is None)
    out = []
    # One kind asked: its rules answer None where none of its policies reaches the object, so
    # whether it is among the kinds met need not be known first.
    for gk in standing.kinds if only is None else (only,):
        found = _KindRules(view.profile(gk), evaluation).apply(key, obj, standing)
        if found is not None:
            out.append(found)
    return out


def compute_kind(
    keys: Iterable[ObjectKey], view: ClusterView, gk: GroupKind
) -> dict[ObjectKey, KindResult | None]:
    """`compute(key, view, only=gk)` for each of `keys`, losers included: what an impact
    preview asks of its 25 objects, in the view before the change and in the one after.

    One kind's rules and one reading of the view serve them all (`ladder.Standings`): what
    the engine asks of the view itself, not of each object, is asked once per view. (The
    levels and groups of equal rung groups kept across the objects as well: measured, not
    adopted, *Choices* on docs/performance.md.)"""
    evaluation = _Evaluation.of(view, with_losers=True)
    rules = _KindRules(view.profile(gk), evaluation)
    standings = ladder.Standings(view, evaluation.attachments, with_kinds=False)
    out: dict[ObjectKey, KindResult | None] = {}
    for key in keys:
        obj = view.get(key)
        out[key] = rules.apply(key, obj, standings.of(key, obj)) if obj is not None else None
    return out


# --- a hub object in parts (`annotation.hubs`) ------------------------------------------------------


class Part(NamedTuple):
    """Some of an object's contexts — a Service's through one route — grouped as `ladder`
    groups them, and the policy kinds met at their rungs."""

    ladder: Ladder
    kinds: frozenset[GroupKind]


def part_of(contexts: Sequence[Context], view: ClusterView) -> Part:
    evaluation = _Evaluation.of(view, with_losers=False)
    lad = ladder.ladder_of(contexts, evaluation.attachments)
    return Part(lad, frozenset(ladder.kinds_at(lad, evaluation.attachments)))


Signature = tuple[Rung, ...]  # the rungs of a context holding a kind's policies, root first


def signatures_of(
    part: Part, gk: GroupKind, view: ClusterView
) -> tuple[tuple[str, ...], dict[Signature, list[int]]]:
    """An Inherited kind on a part's contexts: the policies met, and the contexts (indices into
    the part's ladder) by signature — one board per signature (`signature_answer`), as
    `compute` shares boards within the whole. Where things attach, not their values: kept
    while the ladders are (`memo`), across edits of policies' values."""
    rules = _KindRules(view.profile(gk), _Evaluation.of(view, with_losers=False))
    refs: set[str] = set()
    found: dict[Signature, list[int]] = {}
    for rungs, indices in part.ladder.rung_groups:
        levels = rules.levels(rungs)
        refs.update(p.ref for _, policies in levels for p in policies)
        found.setdefault(tuple(rung for rung, _ in levels), []).extend(indices)
    return tuple(sorted(refs)), found


def signature_answer(
    key: ObjectKey, obj: Mapping[str, Any], view: ClusterView, gk: GroupKind, signature: Signature
) -> ContextResult:
    """The answer (without losers) of an Inherited kind on the object's contexts of one
    signature, as `compute` gives them: the same board, kept in the engine memo."""
    rules = _KindRules(view.profile(gk), _Evaluation.of(view, with_losers=False))
    return rules.board_of(signature, signature, object_leaves(rules.profile, obj), key.display())


def losses_at_one_rung(a: Policy, b: Policy, rung: Rung, view: ClusterView) -> list[Loser]:
    """What each of two policies of one Inherited kind, both attached at `rung`, loses to the
    other there — by the kind's own rules: stanza order, SPEC §4.4's tie-break, merge
    strategies (an atomic stanza loses whole). PA-C01's answer. The object's own values and
    every other rung are left out: the two policies alone on one board."""
    rules = _KindRules(view.profile(a.key.group_kind), _Evaluation.of(view, with_losers=True))
    level = sorted((a, b), key=lambda p: p.order_key)
    done = rules._inherited_board((rung,), [(rung, level)], {}, rung.display())
    pair = {a.ref, b.ref}
    return [
        loser
        for loser in done.losers
        if loser.by is not None and loser.by.policy in pair and loser.by.policy != loser.policy
    ]


def hub_blocked(key: ObjectKey, view: ClusterView, gks: Iterable[GroupKind]) -> bool:
    """Whether the object's answer for some kind depends on all its contexts at once, so that
    it cannot be made part by part: a kind of unknown class among `gks` (those its parts meet)
    or its own policies' (its class is inferred from every context), or an Inherited policy on
    one of its own sections (`hierarchy.with_sections` adds variants of all its contexts)."""
    attachments = _Evaluation.of(view, with_losers=False).attachments
    obj = view.get(key)
    sections = kinds.section_names(key.group_kind, obj) if obj is not None else frozenset()
    own = attachments.on(key)
    for gk in {*gks, *(p.key.group_kind for p, _ in own)}:
        if view.profile(gk).policy_class is None:
            return True
    return any(
        s is not None
        and s in sections
        and view.profile(p.key.group_kind).policy_class == "Inherited"
        for p, s in own
    )


def direct_results(key: ObjectKey, view: ClusterView) -> list[KindResult]:
    """The object's Direct kinds' answers: its own policies only, whatever its contexts."""
    obj = view.get(key)
    if obj is None:
        return []
    evaluation = _Evaluation.of(view, with_losers=False)
    own = evaluation.attachments.on(key)
    sections = kinds.section_names(key.group_kind, obj)
    out = []
    for gk in sorted({p.key.group_kind for p, _ in own}):
        profile = view.profile(gk)
        if profile.policy_class != "Direct":
            continue
        rules = _KindRules(profile, evaluation)
        mine = rules.attached(key)
        targeted = {s for _, s in mine if s is not None and s in sections}
        found = rules.direct(key, mine, sections, targeted)
        if found is not None:
            out.append(found)
    return out


@dataclass(frozen=True, slots=True)
class _Evaluation:
    """What one call shares with every other call on the same state of the view (`memo`)."""

    engine_memo: memo.EngineMemo
    attachments: Attachments
    with_losers: bool

    @classmethod
    def of(cls, view: ClusterView, with_losers: bool) -> _Evaluation:
        engine = memo.engine_of(view)
        return cls(engine, Attachments(view, engine), with_losers)


class _KindRules:
    """One policy kind's rules on one object: Direct (§5.1) or Inherited (§5.2, §1.7)."""

    def __init__(self, profile: KindProfile, evaluation: _Evaluation) -> None:
        self.profile = profile
        self.gk = profile.group_kind
        self.evaluation = evaluation
        self.leaves = StanzaLeaves(profile, evaluation.engine_memo)

    def apply(
        self, key: ObjectKey, obj: Mapping[str, Any], standing: ladder.Reached
    ) -> KindResult | None:
        own = self.attached(key)
        targeted = {s for _, s in own if s is not None and s in standing.sections}
        klass = self.profile.policy_class or self._inferred_class(key, standing.contexts)
        if klass == "Direct":
            return self.direct(key, own, standing.sections, targeted)
        return self._inherited(key, obj, standing.ladder, targeted)

    def attached(self, key: ObjectKey) -> list[tuple[Policy, str | None]]:
        return [
            (p, s) for p, s in self.evaluation.attachments.on(key) if p.key.group_kind == self.gk
        ]

    def _inferred_class(self, key: ObjectKey, contexts: Sequence[Context]) -> PolicyClass:
        keys = {key, *(r.key for ctx in contexts for r in ctx)}
        found = (p for k in keys for p, _ in self.attached(k))
        return "Inherited" if any(p.policy_class == "Inherited" for p in found) else "Direct"

    def _result(
        self, klass: PolicyClass, groups: Sequence[ResultGroup], refs: set[str], lad: Ladder
    ) -> KindResult:
        return KindResult(
            self.gk,
            klass,
            self.profile.merge,
            tuple(groups),
            tuple(sorted(refs)),
            lad.contexts,
            lad.paths,
        )

    def _board(self) -> Board:
        return Board(losers={} if self.evaluation.with_losers else None)

    # --- SPEC §5.1: Direct kinds ------------------------------------------------------------------

    def direct(
        self,
        key: ObjectKey,
        own: list[tuple[Policy, str | None]],
        sections: frozenset[str],
        targeted: set[str],
    ) -> KindResult | None:
        """Only this object's policies count, each section by its own (§4.5); the winner
        (§4.4) applies its spec whole, the others are Conflicted."""
        own = [(p, s) for p, s in own if s is None or s in sections]
        if not own:
            return None
        contexts = [(Rung(key),), *((Rung(key, s),) for s in sorted(targeted))]
        lad = Ladder(tuple(contexts), hierarchy.paths_of(contexts), ())
        groups = []
        for i, context in enumerate(contexts):
            done = self._direct_board(context, own)
            groups.append(ResultGroup(done.effective, done.sources, done.losers, (i,)))
        return self._result("Direct", groups, {p.ref for p, _ in own}, lad)

    def _direct_board(
        self, context: Context, own: Sequence[tuple[Policy, str | None]]
    ) -> ContextResult:
        rung = context[-1]
        board = self._board()
        candidates = list({p.key: p for p, s in own if s == rung.section}.values())
        at = rung.display()
        if self.profile.conflict_keys is not None:  # the vendor's rule (catalog)
            conflicted = {conflict.loser.key: conflict for conflict in self.conflicted(candidates)}
            for policy in candidates:
                claim = Claim(Source(policy.ref, "direct", at), policy)
                if policy.key in conflicted:
                    conflict = conflicted[policy.key]
                    by = Source(conflict.winner.ref, "direct", at)
                    board.lose(claim, WHOLE, conflict.reason, by=by)
                    continue
                for path, value in self.leaves.of(policy, "direct").items():
                    board.offer(path, value, claim)
            return board.result(context)
        for i, policy in enumerate(candidates):
            claim = Claim(Source(policy.ref, "direct", at), policy)
            if i == 0:
                for path, value in self.leaves.of(policy, "direct").items():
                    board.offer(path, value, claim)
            else:
                winner = candidates[0]
                board.lose(
                    claim, WHOLE, f"conflicted: {winner.ref} wins ({tie_why(policy, winner)})"
                )
        return board.result(context)

    # --- SPEC §5.2 and §1.7: Inherited kinds ---------------------------------------------------

    def _inherited(
        self, key: ObjectKey, obj: Mapping[str, Any], lad: Ladder, targeted: set[str]
    ) -> KindResult | None:
        """Every context of the object on a board of its own — shared by the contexts that
        meet this kind's policies at the same rungs."""
        if targeted:  # variants ending at a targeted section: their policy rungs differ
            contexts = hierarchy.with_sections(list(lad.contexts), key, targeted)
            lad = ladder.ladder_of(contexts, self.evaluation.attachments)
        levels = {rungs: self.levels(rungs) for rungs, _ in lad.rung_groups}
        refs = {p.ref for found in levels.values() for _, ps in found for p in ps}
        if not refs:
            return None
        from_object = object_leaves(self.profile, obj)
        groups = self._shared_boards(lad, levels, from_object, key.display())
        return self._result("Inherited", groups, refs, lad)

    def levels(self, rungs: tuple[Rung, ...]) -> list[tuple[Rung, Sequence[Policy]]]:
        """The rungs holding a policy of this kind, with those policies, root first."""
        found = []
        for rung in rungs:
            policies = self.evaluation.attachments.at(rung).get(self.gk)
            if policies:
                found.append((rung, policies))
        return found

    def _shared_boards(
        self,
        lad: Ladder,
        levels: Mapping[tuple[Rung, ...], list[tuple[Rung, Sequence[Policy]]]],
        from_object: Mapping[leaves.Path, Any],
        object_at: str,
    ) -> list[ResultGroup]:
        """Contexts that meet the same policies at the same rungs share one board: a Service
        behind 10,000 routes of one Gateway has 10,000 contexts and one answer.

        Shared beyond this object too: while the state holds, a rung's policies are fixed, so
        the rungs holding this kind's policies name the board, for every object whose
        contexts meet them — unless the object's own values take part (SPEC §5.9).
        """
        by_signature: dict[tuple[Rung, ...], tuple[ContextResult, list[int]]] = {}
        for rungs, indices in lad.rung_groups:
            signature = tuple(rung for rung, _ in levels[rungs])
            entry = by_signature.get(signature)
            if entry is None:
                context = lad.contexts[indices[0]]
                done = self.board_of(signature, context, from_object, object_at)
                entry = by_signature[signature] = (done, [])
            entry[1].extend(indices)
        groups = [
            ResultGroup(done.effective, done.sources, done.losers, tuple(sorted(indices)))
            for done, indices in by_signature.values()
        ]
        groups.sort(key=lambda g: g.indices[0])
        return groups

    def board_of(
        self,
        signature: tuple[Rung, ...],
        context: Context,
        from_object: Mapping[leaves.Path, Any],
        object_at: str,
    ) -> ContextResult:
        """The board of contexts meeting this kind's policies at `signature`'s rungs: kept in
        the engine memo for every object whose contexts meet them, unless the object's own
        values take part (SPEC §5.9)."""
        kept = self.evaluation.engine_memo.boards if not from_object else {}
        memo_key = (self.gk, self.evaluation.with_losers, signature)
        done = kept.get(memo_key)
        if done is None:
            at = self.evaluation.attachments.at
            levels = [(rung, at(rung)[self.gk]) for rung in signature]
            done = kept[memo_key] = self._inherited_board(context, levels, from_object, object_at)
        return done

    def _inherited_board(
        self,
        context: Context,
        levels: list[tuple[Rung, Sequence[Policy]]],
        from_object: Mapping[leaves.Path, Any],
        object_at: str,
    ) -> ContextResult:
        """One context, one stanza at a time in the order they get to choose: overrides root
        first, then the object's own values, then defaults target first.

        Each stanza meets what is already claimed by its strategy: `merge` claims the fields
        still free; an `atomic` override claims its fields and leaves everything more specific
        unset; an `atomic` default applies only where nothing is claimed yet — or where every
        claim so far comes from a policy that merges onto less specific ones (Envoy Gateway's
        `mergeType`) — and is skipped whole otherwise. A kind's `merge: atomic` (§5.5) makes
        every stanza of it atomic unless the stanza selects its own strategy.
        """
        board = self._board()
        conflicted: set[tuple[Rung, ObjectKey]] = set()  # at that rung only (per target)
        for rung, policies in levels:
            for conflict in self.conflicted(policies):
                at = sys.intern(rung.display())
                board.lose(
                    Claim(
                        Source(conflict.loser.ref, self._stanza_of(conflict.loser), at),
                        conflict.loser,
                    ),
                    WHOLE,
                    conflict.reason,
                    by=Source(conflict.winner.ref, self._stanza_of(conflict.winner), at),
                )
                conflicted.add((rung, conflict.loser.key))
        offers = self._offers(levels, conflicted)
        replaced_by: Claim | None = None  # the atomic override that took everything below
        for claim, found in offers["override"]:  # §5.2a: root first
            if replaced_by is not None:
                _skip(board, claim, replaced_by, "replaced whole by an atomic override")
                continue
            for path, value in found.items():
                board.offer(path, value, claim)
            if self._strategy(claim.policy, "override") == "atomic":
                replaced_by = claim
        if replaced_by is not None:
            for claim, _ in offers["default"]:
                _skip(board, claim, replaced_by, "replaced whole by an atomic override")
            return board.result(context)
        object_claim = Claim(Source(None, "object", object_at), None)
        for path, value in from_object.items():  # §5.2b
            board.offer(path, value, object_claim)
        # Whether an atomic default may still apply: nothing claimed yet, or only by policies
        # that merge onto less specific ones.
        open_below = not board.won
        closed_by: Claim | None = None  # the default that closed it, when it set nothing
        for claim, found in offers["default"]:  # §5.2c: target first
            if self._strategy(claim.policy, "default") == "atomic" and not open_below:
                _skip(board, claim, _first_claim(board) or closed_by, "atomic: skipped whole")
                continue
            for path, value in found.items():
                board.offer(path, value, claim)
            if open_below and not (
                claim.policy is not None and claim.policy.merges_onto_less_specific
            ):
                open_below, closed_by = False, claim
        return board.result(context)

    def _offers(
        self,
        levels: list[tuple[Rung, Sequence[Policy]]],
        conflicted: set[tuple[Rung, ObjectKey]],
    ) -> dict[Stanza, list[Offer]]:
        """Each policy's stanzas in the order they get to choose: overrides root first,
        defaults target first; within a level, SPEC §4.4 order. A policy the vendor's rule
        makes Conflicted at a rung (`conflicted`) offers nothing there."""
        offers: dict[Stanza, list[Offer]] = {"override": [], "default": []}
        walks: tuple[tuple[Stanza, list[tuple[Rung, Sequence[Policy]]]], ...] = (
            ("override", levels),
            ("default", levels[::-1]),
        )
        for stanza, walk in walks:
            for rung, policies in walk:
                for policy in policies:
                    if conflicted and (rung, policy.key) in conflicted:
                        continue
                    found = self.leaves.of(policy, stanza)
                    if found or (stanza == "default" and self._replaces_when_empty(policy)):
                        # Interned: a board per context group holds its sources, and the
                        # same policy at the same rung is in thousands of them.
                        source = Source(sys.intern(policy.ref), stanza, sys.intern(rung.display()))
                        offers[stanza].append((Claim(source, policy), found))
        return offers

    def conflicted(self, policies: Sequence[Policy]) -> list[Conflict]:
        """Of `policies` on one target, in SPEC §4.4 order, those the kind's vendor makes
        Conflicted there (catalog `conflict_keys`): a policy that sets a field which an earlier
        one, not itself Conflicted, sets too. None of them for a kind that follows SPEC's rule."""
        keys = self.profile.conflict_keys
        if keys is None or len(policies) < 2:
            return []
        out: list[Conflict] = []
        applied: list[tuple[Policy, frozenset[leaves.Path]]] = []
        for policy in policies:
            mine = self._keys_set(policy, keys)
            clash = next(
                ((other, theirs & mine) for other, theirs in applied if theirs & mine), None
            )
            if clash is None:
                applied.append((policy, mine))
                continue
            winner, both = clash
            key = ".".join(next(k for k in keys if k in both))  # the first in the vendor's order
            out.append(Conflict(policy, winner, key))
        return out

    def _keys_set(self, policy: Policy, keys: tuple[leaves.Path, ...]) -> frozenset[leaves.Path]:
        """Which of `keys` the policy sets: the key itself, or any field below it."""
        stanzas: tuple[StanzaName, ...] = (
            ("direct",) if self.profile.policy_class == "Direct" else ("override", "default")
        )
        paths = [path for stanza in stanzas for path in self.leaves.of(policy, stanza)]
        return frozenset(key for key in keys if any(path[: len(key)] == key for path in paths))

    def _stanza_of(self, policy: Policy) -> Stanza:
        """Where an Inherited policy's settings are, to name it as a loser or a winner."""
        return "override" if self.leaves.of(policy, "override") else "default"

    def _replaces_when_empty(self, policy: Policy) -> bool:
        """A policy whose settings are its spec proper, merged atomically, takes part as a
        default even when it sets nothing: the most specific one wins whole (§5.5), and then
        nothing of the less specific ones applies — as Envoy Gateway applies an empty policy
        on a route below a Gateway's (docs/decisions.md). An empty explicit stanza is unset
        (§5.4), and an empty policy that merges onto less specific ones changes nothing."""
        return policy.settings_in_spec and self._strategy(policy, "default") == "atomic"

    def _strategy(self, policy: Policy | None, stanza: Stanza) -> str:
        """The stanza's own merge selector (SPEC §1.7), else the kind's strategy."""
        assert policy is not None  # a stanza's claim always names its policy
        own = policy.strategy(stanza)
        if own is not None:
            return own
        return "atomic" if self.profile.merge == "atomic" else "merge"


class Conflict(NamedTuple):
    """A policy its vendor's rule makes Conflicted on one target (catalog `conflict_keys`):
    the earlier policy it meets there, and the first field both set."""

    loser: Policy
    winner: Policy
    key: str

    @property
    def reason(self) -> str:
        why = tie_why(self.loser, self.winner)
        return f"conflicted: {self.winner.ref} also sets {self.key} and comes first ({why})"


def same_target_conflict(a: Policy, b: Policy, view: ClusterView) -> Conflict | None:
    """Whether the kind's vendor makes one of two policies on one target Conflicted (catalog
    `conflict_keys`): PA-C01's answer for such a kind, by the engine's own reading."""
    rules = _KindRules(view.profile(a.key.group_kind), _Evaluation.of(view, with_losers=False))
    found = rules.conflicted(sorted((a, b), key=lambda p: p.order_key))
    return found[0] if found else None


def _skip(board: Board, claim: Claim, winner: Claim | None, why: str) -> None:
    """A whole stanza that does not apply here, recorded against what took its place."""
    if winner is None or claim.policy is winner.policy:
        return
    board.lose(claim, WHOLE, f"{reason(claim, winner)} ({why})", by=winner.source)


def _first_claim(board: Board) -> Claim | None:
    """The claim that took the board's first leaf: the most telling winner to name."""
    return next((claim for _, claim in board.won.values()), None)
