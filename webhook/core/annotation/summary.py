"""The annotation value: schema v1 of SPEC §3.3, as compact deterministic JSON.

Same inputs, same bytes: keys sorted, no spaces, contexts grouped and ordered by their paths.
Over the size cap it degrades in the order SPEC §3.3 gives — `sources` first, then contexts
(last ones first) — and always keeps every kind's `policies`, flagging `truncated: true`.
Decision (docs/decisions.md): when even the `policies` lists exceed the cap, they are kept
whole anyway; the cap is a target for the rest, never a reason to hide which policies apply.
"""

from __future__ import annotations

import functools
import struct
import sys
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

from webhook.core.annotation import compact_json
from webhook.core.engine import effective, memo
from webhook.core.engine.board import ContextResult
from webhook.core.model.refs import GroupKind, ObjectKey
from webhook.core.model.settings import Settings
from webhook.core.state.overlay import OverlayView
from webhook.core.state.store import ClusterView

VERSION = 1
C = TypeVar("C")  # a context of the value, as data or as what stands for it (`hubs.Group`)


def summarize(
    key: ObjectKey,
    view: ClusterView,
    settings: Settings,
    *,
    incoming: Mapping[str, Any] | None = None,
) -> str | None:
    """The annotation value for one object, or None when no policy reaches it."""
    if incoming is not None:
        view = OverlayView(view, upserts=[incoming])
    return text(summarize_in_pieces(key, view, settings)[0])


def summarize_in_pieces(
    key: ObjectKey, view: ClusterView, settings: Settings
) -> tuple[Fragments | None, Spans | None]:
    """The value, in fragments (`text` joins them), and where each kind's piece lies in it
    (None: truncated, no pieces)."""
    results = effective.compute(key, view, with_losers=False)
    return _rendered(results, settings.annotation_max_bytes, memo.engine_of(view).dumps)


def text(value: Fragments | None) -> str | None:
    """The annotation value its fragments make."""
    return "".join(value) if value is not None else None


def kind_pieces(key: ObjectKey, view: ClusterView, gk: GroupKind) -> Pieces:
    """The piece of one kind for one object ({} when that kind no longer reaches it)."""
    results = effective.compute(key, view, with_losers=False, only=gk)
    return pieces_of(results, memo.engine_of(view).dumps)


class DumpedGroup(NamedTuple):
    """A shared board's JSON, kept in the engine memo for as long as the board itself.

    Only what every value needs is kept: the two strings a context of this answer is written
    between. The answer as data (`sources_json`) is made again when asked, for the rare value
    written as data (truncated, explained); the board's effective value and sources are held
    anyway.
    """

    effective: Mapping[str, Any]  # held, so that its id stays its own while kept
    sources: Mapping[str, Any]  # likewise (the board's `Source`s)
    # A context of this answer, as the value writes it around its paths: `{"effective":…,
    # "paths":[` and `],"sources":…}`. Every value holding the answer holds these two strings.
    opening: str
    closing: str

    @property
    def group_key(self) -> tuple[str, str]:
        """Contexts alike in effective value and sources are one entry. In this order the
        keys sort as the answers' JSON does: a JSON object is never a prefix of another."""
        return self.opening, self.closing

    def sources_json(self) -> dict[str, Any]:
        """The sources as JSON-ready data."""
        return {ptr: src.as_json() for ptr, src in self.sources.items()}


Dumps = memo.Table[tuple[int, int], Any]  # (id of effective, id of sources) → DumpedGroup


def render(
    results: Sequence[effective.KindResult],
    *,
    max_bytes: int,
    dumps: Dumps | None = None,
) -> str | None:
    return text(_rendered(results, max_bytes, dumps if dumps is not None else {})[0])


def _rendered(
    results: Sequence[effective.KindResult],
    max_bytes: int,
    dumps: Dumps,
) -> tuple[Fragments | None, Spans | None]:
    fitted = fit(pieces_of(results, dumps), max_bytes)
    if fitted is not None:
        return fitted
    return _cut(summary_value(results, dumps)["policies"], max_bytes)


def rendered(
    policies: Mapping[str, dict[str, Any]], max_bytes: int
) -> tuple[Fragments | None, Spans | None]:
    """The value holding these kinds' entries (`policies[kind]`), assembled from their pieces
    when it fits the cap, else cut as SPEC §3.3 says (no spans then). Each entry is made and
    dumped once (`hubs` hands its own, each a piece of one fragment)."""
    fitted = fit({name: (dump(entry),) for name, entry in policies.items()}, max_bytes)
    if fitted is not None:
        return fitted
    return _cut(policies, max_bytes)


def _cut(policies: Mapping[str, dict[str, Any]], max_bytes: int) -> tuple[Fragments, None]:
    value = {"version": VERSION, "policies": dict(policies), "truncated": False}
    return (dump(truncated(value, max_bytes)),), None


# The value is assembled from one piece per kind — the JSON of `policies[kind]` — so that the
# cache can replace the piece of the one kind a policy write touched (kinds never interact).
# Both are kept as fragments, not one text: what many values hold alike — each answer's
# `effective` and `sources`, each kind's name, a list of policies — is one string they all
# refer to, and only the paths are each value's own. Joined, the fragments are the text.
Fragments = tuple[str, ...]
Pieces = dict[str, Fragments]  # kind name (`RetryPolicy.policies.example.com`) → its entry's JSON


class Spans(NamedTuple):
    """Where each kind's piece lies in an assembled value (`pieces_in` reads them back).

    Kept small, as a cache keeps one per object it annotates: `names`, sorted, is one tuple
    for every value with the same kinds, and `bounds` packs each piece's first fragment and
    the one after its last as 32-bit unsigned integers. Kept as a dict of (start, end) tuples
    they made the cache's own bookkeeping about twice as large (docs/performance.md,
    *Choices*).
    """

    names: tuple[str, ...]
    bounds: bytes


NO_SPANS = Spans((), b"")

_Held = TypeVar("_Held", bound=Hashable)


class _HeldOnce(Generic[_Held]):
    """One object per distinct value, for what every cached value holds alike. Bounded (it
    starts over when full: shared less, never wrong) for a cluster whose values never repeat."""

    def __init__(self, limit: int, make: Callable[[_Held], _Held]) -> None:
        self._held: dict[_Held, _Held] = {}
        self._limit = limit
        self._make = make  # the object to keep for a value seen first

    def __call__(self, value: _Held) -> _Held:
        found = self._held.get(value)
        if found is None:
            if len(self._held) >= self._limit:
                self._held.clear()
            found = self._held[value] = self._make(value)
        return found


# The kinds' names of values, one tuple per set of kinds (a handful in a cluster), each name
# interned: made anew per value, they were tens of thousands of strings.
_shared_names: _HeldOnce[tuple[str, ...]] = _HeldOnce(
    4096, lambda names: tuple(sys.intern(name) for name in names)
)
# The spans of values laid out alike (objects whose contexts are alike): at the benchmark's
# 1x, 14,800 values had 2,600 distinct spans.
_shared_spans: _HeldOnce[Spans] = _HeldOnce(
    65_536, lambda spans: Spans(_shared_names(spans.names), spans.bounds)
)


@functools.lru_cache(maxsize=64)
def _bounds_format(kinds: int) -> struct.Struct:
    return struct.Struct(f"<{2 * kinds}I")


def pieces_of(results: Sequence[effective.KindResult], dumps: Dumps | None = None) -> Pieces:
    dumps = dumps if dumps is not None else {}
    # One object's paths, met again by its other kinds.
    written: dict[tuple[str, ...], Fragments] = {}
    return {str(r.group_kind): _kind_fragments(r, dumps, written) for r in results}


_OPEN = '{"policies":{'
_CLOSE = f'}},"truncated":false,"version":{VERSION}}}'


def assemble(pieces: Pieces) -> tuple[Fragments | None, Spans]:
    """The untruncated value, byte for byte `dump(summary_value(...))` once joined, and where
    each piece lies in it; None when no kind reaches the object."""
    if not pieces:
        return None, NO_SPANS
    parts = [_OPEN]
    names = tuple(sorted(pieces))  # as orjson sorts keys: by code point
    bounds: list[int] = []
    for i, name in enumerate(names):
        parts.append(_kind_head(name, first=not i))
        bounds.append(len(parts))
        parts += pieces[name]
        bounds.append(len(parts))
    parts.append(_CLOSE)
    return tuple(parts), _shared_spans(Spans(names, _bounds_format(len(names)).pack(*bounds)))


def fit(pieces: Pieces, max_bytes: int) -> tuple[Fragments | None, Spans] | None:
    """The assembled value and its spans, or None when it is over the cap (to be truncated)."""
    value, spans = assemble(pieces)
    if value is not None and _size("".join(value)) > max_bytes:
        return None  # measured joined: one pass in C, not a call per fragment
    return value, spans


def pieces_in(value: Fragments, spans: Spans) -> Pieces:
    """The pieces of an assembled value, back from their spans."""
    bounds = _bounds_format(len(spans.names)).unpack(spans.bounds)
    return {name: value[bounds[2 * i] : bounds[2 * i + 1]] for i, name in enumerate(spans.names)}


@functools.lru_cache(maxsize=1024)
def _kind_head(name: str, *, first: bool) -> str:
    """`"Kind.group":` (after a comma, but for the first kind): one string per kind."""
    return f"{'' if first else ','}{dump(name)}:"


@functools.lru_cache(maxsize=8192)
def _policies_tail(policies: tuple[str, ...]) -> str:
    """`],"policies":[…]}`, the end of a kind's entry: one string per list of policies.

    Interned, as the paths are: past the cache's bound (at 8x the default scale, tens of
    thousands of distinct lists) a list made again was a new copy in every value that held it
    (27,369 copies, 5.2 MB, there)."""
    return sys.intern(f'],"policies":{dump(list(policies))}}}')


def _size(text: str) -> int:
    return len(text) if text.isascii() else size(text)


def summary_value(
    results: Sequence[effective.KindResult], dumps: Dumps | None = None
) -> dict[str, Any]:
    """The whole, untruncated v1 value as plain JSON-ready data."""
    dumps = dumps if dumps is not None else {}
    return {
        "version": VERSION,
        "policies": {str(r.group_kind): _kind_entry(r, dumps) for r in results},
        "truncated": False,
    }


def _kind_fragments(
    result: effective.KindResult, dumps: Dumps, written: dict[tuple[str, ...], Fragments]
) -> Fragments:
    """`dump(_kind_entry(result, dumps))`, in fragments: each context is its answer's opening,
    its paths (`_path_fragments`), and its answer's closing (`DumpedGroup`).

    Nearly all of a value's text is its paths, and each path is listed by every kind that
    reaches the object through it, and again in each piece made anew after a policy edit:
    each is written once per object (`written`) and interned, so one string serves them all
    (as `trim` interns names; mortal on CPython 3.11, the image's).
    """
    out = ['{"contexts":[']
    for i, (paths, done) in enumerate(_ordered_groups(result, dumps)):
        if i:
            out.append(",")
        out.append(done.opening)
        for j, path in enumerate(paths):
            if j:
                out.append(",")
            path_json = written.get(path)
            if path_json is None:
                path_json = written[path] = _path_fragments(path)
            out += path_json
        out.append(done.closing)
    out.append(_policies_tail(result.policies))
    return tuple(out)


def _path_fragments(path: tuple[str, ...]) -> Fragments:
    """A printed path's JSON as its head and its last entry (`["GatewayClass/gc","Gateway/
    infra/gw#http",` and `"HTTPRoute/apps/r"]`), each interned: the head is every route's
    on that listener alike, the last entry every path's of the object, where one string per
    path held each object's own copy of the head (docs/performance.md, *Choices*)."""
    whole = dump(path)
    if len(path) < 2:
        return (sys.intern(whole),)
    last = f"{dump(path[-1])}]"  # not after the last `","`: an entry `,` is written so
    return sys.intern(whole[: -len(last)]), sys.intern(last)


def _kind_entry(result: effective.KindResult, dumps: Dumps) -> dict[str, Any]:
    contexts = [
        {"effective": done.effective, "sources": done.sources_json(), "paths": paths}
        for paths, done in _ordered_groups(result, dumps)
    ]
    return {"contexts": contexts, "policies": list(result.policies)}


def _ordered_groups(
    result: effective.KindResult, dumps: Dumps
) -> list[tuple[list[tuple[str, ...]], DumpedGroup]]:
    """A kind's contexts as the value lists them: those with the same answer as one entry
    (they share one result object, within an object and, through the engine memo, across
    objects: each dumped once), ordered by their sorted paths, then the answer."""
    groups: dict[tuple[str, str], tuple[DumpedGroup, set[tuple[str, ...]]]] = {}
    for found in result.groups:
        done = dumped_group(found, dumps)
        group = groups.get(done.group_key)
        if group is None:
            group = groups[done.group_key] = (done, set())
        group[1].update(map(result.all_paths.__getitem__, found.indices))
    ordered = sorted(  # the group key before the group: unique, so groups are never compared
        (sorted(paths), group_key, done)  # paths as tuples: JSON arrays
        for group_key, (done, paths) in groups.items()
    )
    return [(paths, done) for paths, _, done in ordered]


def dumped_group(found: effective.ResultGroup | ContextResult, dumps: Dumps) -> DumpedGroup:
    """The JSON of one board's answer, made once per board while the engine memo keeps it."""
    identity = (id(found.effective), id(found.sources))
    done: DumpedGroup | None = dumps.get(identity)
    if done is None:
        sources = {ptr: src.as_json() for ptr, src in found.sources.items()}
        effective_json, sources_dump = dump(found.effective), dump(sources)
        done = dumps[identity] = DumpedGroup(
            found.effective,
            found.sources,
            # Interned, as `trim` interns names: equal answers of different boards (another
            # signature, the same values) are one string too. Made once per board, not per
            # value; freed with their last holder where interned strings are mortal (CPython
            # 3.11, the image's; 3.12.5 on), kept for good on 3.12.0-3.12.4.
            sys.intern(f'{{"effective":{effective_json},"paths":['),
            sys.intern(f'],"sources":{sources_dump}}}'),
        )
    return done


def truncated(value: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    """Drop `sources` everywhere, then contexts from the end, until the value fits."""
    kinds: dict[str, dict[str, Any]] = {
        name: {
            "contexts": [_without_sources(c) for c in entry["contexts"]],
            "policies": entry["policies"],
        }
        for name, entry in value["policies"].items()
    }
    out = {"version": VERSION, "policies": kinds, "truncated": True}
    contexts = {name: entry["contexts"] for name, entry in kinds.items()}
    drop_to_fit(contexts, size(dump(out)), max_bytes, lambda context: size(dump(context)))
    return out


def drop_to_fit(
    contexts: Mapping[str, list[C]], total: int, max_bytes: int, size_of: Callable[[C], int]
) -> int:
    """Drop, in place, the last context of the last kind still holding some until `total`
    (the value's size) is within `max_bytes`; the size left. Each context's share of the size
    is its own JSON plus the comma before it, so nothing is dumped again. Shared by the value
    cut whole (`truncated`) and the one cut by its sizes alone (`hubs`)."""
    for name in sorted(contexts, reverse=True):
        found = contexts[name]
        while found and total > max_bytes:
            total -= size_of(found.pop()) + (1 if found else 0)
    return total


def _without_sources(context: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in context.items() if k != "sources"}


def dump(value: Any) -> str:
    """Compact JSON, keys sorted: the annotation's bytes (see `compact_json` for how)."""
    return compact_json.dumps(value, sort_keys=True)


def size(text: str) -> int:
    """The value's length in UTF-8 bytes, as the API server counts an annotation."""
    # surrogatepass: a lone surrogate (valid as a JSON escape in a name) is no UTF-8, but
    # counting it as its three bytes beats a crash; the API server stores it as U+FFFD, also 3.
    return len(text.encode("utf-8", "surrogatepass"))
