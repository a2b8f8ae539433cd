"""Contexts: the root-to-object paths through the Gateway API hierarchy (SPEC §4).

A context is a tuple of rungs, root first. Namespace rungs are implied (never printed); a
section (listener, named rule, Service port) is a rung of its own just after its object.
This module only answers "which paths lead to X" and "what lies below a rung"; what policies
do along those paths is `effective`'s business. Reading only: never writes to the view.

Decisions where SPEC §4 is silent (docs/decisions.md):
- GatewayClass: one context, itself. Gateway: one, `GatewayClass → Gateway` (no GatewayClass
  rung when the class object does not exist). A ListenerSet: `… → Gateway → ListenerSet`,
  only when its Gateway exists and `allowedListeners` admits it (default: none).
- A route: one context per (parentRef, admitting listener), ending at the route. Named rules
  are not structural for the route's own contexts; `with_sections` adds a variant ending at
  `Route#rule` for each rule a policy targets, as for every other sectioned object.
- A Service: one context per (route context, backendRef), through `Route#rule` when the rule
  is named, ending at `Service#port` when the backendRef's port number matches a named port.
  Otherwise (no attached route uses it) one standalone context, `Service`.
- A mesh parentRef (group "", kind Service) puts `Service` in place of GatewayClass, Gateway
  and listener; its `port` is ignored. A route whose parentRefs admit nowhere has no context:
  no Inherited policy reaches it, and its annotation is absent unless a Direct policy targets
  the route itself (Direct kinds do not need contexts, see `effective`).
- Only Service backends count; a cross-namespace backendRef counts only with a ReferenceGrant.
  Who may attach where (parentRefs, allowedRoutes, selectors) is `attachment`'s; listener
  `hostname` intersection is not checked.
"""

from __future__ import annotations

import bisect
import functools
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from webhook.core.engine.attachment import (
    BackendRef,
    ParentRef,
    backend_allowed,
    backend_refs,
    listener_admits,
    listener_set_parent,
    namespace_admitted,
    parent_refs,
    spec_mapping,
)
from webhook.core.engine.hierarchy_index import HierarchyIndex
from webhook.core.engine.memo import (
    ServiceParts,
    StructureMemo,
    hierarchy_view,
    index_of,
    pending_batch,
    shared_structure,
    structure_of,
)
from webhook.core.model import kinds
from webhook.core.model.refs import CORE_GROUP, GATEWAY_GROUP, ObjectKey
from webhook.core.state.overlay import OverlayView
from webhook.core.state.store import ClusterView


class Rung(NamedTuple):
    """One level of a context: an object, or one section of it (`Gateway/infra/gw#https`).

    A named tuple, as `ObjectKey`: rungs are dictionary keys on the engine's hot path (a
    Service behind 10,000 routes has 20,000 contexts), and a tuple hashes and compares in C.
    """

    key: ObjectKey
    section: str | None = None

    @property
    def implied(self) -> bool:
        """Namespace rungs are levels policies attach to, but are not printed in paths."""
        return self.key.kind == "Namespace" and not self.key.group  # hot: no GroupKind built

    def display(self) -> str:
        return self.key.display(self.section)


Context = tuple[Rung, ...]


# One rung per Namespace, however many contexts pass it: every route's and Service's context
# has one or more, and a rung made anew per context was a seventh of the contexts kept (1x).
@functools.lru_cache(maxsize=4096)
def namespace_rung(name: str) -> Rung:
    return Rung(ObjectKey(CORE_GROUP, "Namespace", "", name))


def path_of(context: Context, printed: dict[Rung, str] | None = None) -> tuple[str, ...]:
    """The printed path (SPEC §3.3): one entry per object, `#section` where it passes one.

    Each entry is interned: the printed paths are kept (in each kept ladder), and the same rung
    is printed in every context through it — a Gateway's name in thousands of them — so that
    one string serves them all. `printed`: the rungs printed so far (`paths_of`), "" for one
    that is not printed.
    """
    if printed is None:
        printed = {}
    entries: list[str] = []
    last: ObjectKey | None = None
    for rung in context:
        text = printed.get(rung)
        if text is None:
            text = printed[rung] = "" if rung.implied else sys.intern(rung.display())
        if not text:
            continue
        if rung.key == last:
            entries[-1] = text
        else:
            entries.append(text)
            last = rung.key
    return tuple(entries)


def paths_of(contexts: Iterable[Context]) -> tuple[tuple[str, ...], ...]:
    """`path_of` of each context, each rung printed once: an object's contexts pass the same
    rungs again and again (a Service's, the Gateways of each route in front of it)."""
    printed: dict[Rung, str] = {}
    return tuple(path_of(context, printed) for context in contexts)


def sort_contexts(contexts: Iterable[Context]) -> list[Context]:
    """Unique contexts in a fixed order, so that results never depend on load order."""
    return sorted(set(contexts), key=_context_order)


def _context_order(context: Context) -> tuple[tuple[ObjectKey, str], ...]:
    # An ObjectKey compares as (group, kind, namespace, name); a section as text, "" for none.
    return tuple([(key, section or "") for key, section in context])


# --- contexts ----------------------------------------------------------------------------------


def contexts_of(
    key: ObjectKey, view: ClusterView, *, incoming: Mapping[str, Any] | None = None
) -> list[Context]:
    """Every context that ends at `key` (or at one of its sections, for Service ports)."""
    if incoming is not None:
        view = OverlayView(view, upserts=[incoming])
    return list(_known_contexts(key, view, structure_of(view)))


def kept_contexts(key: ObjectKey, view: ClusterView) -> tuple[Context, ...]:
    """`contexts_of`, as the structure memo keeps them: its own tuple, not a copy, for a
    caller that keeps them too (a kept ladder), so that the two hold one."""
    return _known_contexts(key, view, structure_of(view))


def contexts_by_route(
    key: ObjectKey, view: ClusterView
) -> Mapping[ObjectKey, tuple[Context, ...]] | None:
    """A busy Service's contexts by the route each passes through (each route's sorted), where
    a memo is kept for `view` (a store, or an overlay that leaves the hierarchy alone): what its
    value is made of, route by route (`annotation.hubs`). None elsewhere: no memo, no Service,
    or one whose contexts are made whole (behind fewer than `PARTS_MIN_ROUTES` routes).
    Read it before the store is written again."""
    found = _kept_service(key, view)
    if found is None:
        return None
    memo, obj = found
    return _service_parts(key, obj, view, memo).by_route


def advance_by_route(key: ObjectKey, view: ClusterView, *, limit: int) -> bool:
    """Some of `contexts_by_route`'s work ahead of it: the parts of at most `limit` routes of a
    busy Service — those written since its parts were last read, or, where the memo started
    over, every route's in turns. True while some remain. Between two calls the view may be
    written; the parts stay right (a route not yet made keeps its old part until its turn)."""
    found = _kept_service(key, view)
    if found is None:
        return False
    memo, obj = found
    parts = memo.services.get(key)
    if parts is None:  # made route by route, as if every route had just been written
        routes_here = index_of(view).routes_of_backend(key)
        parts = memo.services[key] = ServiceParts(pending=set(routes_here))
    if parts.pending:
        _service_parts(key, obj, view, memo, limit=limit)
    return bool(parts.pending)


def _kept_service(
    key: ObjectKey, view: ClusterView
) -> tuple[StructureMemo, Mapping[str, Any]] | None:
    """The memo and the object of a Service whose contexts `view` keeps by route, else None."""
    memo = shared_structure(view) if key.group_kind == kinds.SERVICE else None
    obj = view.get(key) if memo is not None else None
    if memo is None or obj is None:
        return None
    if key not in memo.services and not _kept_by_route(key, view):
        return None
    return memo, obj


# A Service behind this many routes is a hub: it keeps its contexts by route
# (`memo.ServiceParts`), so that a route's write makes only that route's part again, and its
# value is made from pieces by route (`annotation.hubs`). Fewer are made whole, as other
# objects: their pieces would cost more than they save.
PARTS_MIN_ROUTES = 32


def _known_contexts(key: ObjectKey, view: ClusterView, memo: StructureMemo) -> tuple[Context, ...]:
    found = memo.contexts.get(key)
    if found is None:
        if key in memo.services or _kept_by_route(key, view):
            return _service_contexts(key, view, memo)
        found = memo.contexts[key] = _contexts(key, view, memo)
    return found


def _kept_by_route(key: ObjectKey, view: ClusterView) -> bool:
    return (
        key.kind == "Service"
        and not key.group
        and len(index_of(view).routes_of_backend(key)) >= PARTS_MIN_ROUTES
    )


def _backends(
    route: ObjectKey, obj: Mapping[str, Any], memo: StructureMemo
) -> tuple[BackendRef, ...]:
    """A route's backendRefs as read, kept until it is written: a tuple, sized to fit (a list
    grown by appends holds room for more), its Services' keys kept once (`memo.keys`)."""
    found = memo.backends.get(route)
    if found is None:
        found = memo.backends[route] = tuple(backend_refs(route, obj, memo.keys))
    return found


def _contexts(key: ObjectKey, view: ClusterView, memo: StructureMemo) -> tuple[Context, ...]:
    obj = view.get(key)
    if obj is None:
        return ()
    gk = key.group_kind
    found: list[Context]
    if gk == kinds.GATEWAY_CLASS:
        found = [(Rung(key),)]
    elif gk == kinds.GATEWAY:
        found = [_gateway_root(key, obj, view)]
    elif gk == kinds.LISTENER_SET:
        found = _listener_set_contexts(key, obj, view)
    elif gk in kinds.ROUTE_KINDS:
        found = _route_contexts(key, obj, view, memo)
    elif gk == kinds.SERVICE:  # a Service behind few routes, made whole
        ports, standalone = _port_rungs(key, obj), _standalone(key)
        routes = sorted(index_of(view).routes_of_backend(key))
        found = _chain(_contexts_through(key, r, ports, standalone, view, memo) for r in routes)
        found = found or [standalone]
    else:
        found = []
    return tuple(sort_contexts(found))


def with_sections(
    contexts: list[Context], key: ObjectKey, sections: Iterable[str]
) -> list[Context]:
    """Add, for each section a policy targets, contexts ending at `Object#section`.

    Where a context already ends at that section (a backendRef's port), nothing is added;
    otherwise every context ending at the object itself gets a variant; a Service only
    reached through other ports gets a standalone one.
    """
    sections = sorted(set(sections))
    if not sections:
        return list(contexts)
    out = list(contexts)
    for section in sections:
        end = Rung(key, section)
        if any(ctx and ctx[-1] == end for ctx in contexts):
            continue
        bases = [ctx for ctx in contexts if ctx and ctx[-1] == Rung(key)]
        if not bases and contexts:
            bases = [_standalone(key)]
        out.extend((*ctx, end) for ctx in bases)
    return sort_contexts(out)


def _standalone(key: ObjectKey) -> Context:
    return (namespace_rung(key.namespace), Rung(key)) if key.namespace else (Rung(key),)


def _gateway_root(key: ObjectKey, obj: Mapping[str, Any], view: ClusterView) -> Context:
    class_name = spec_mapping(obj).get("gatewayClassName")
    rungs: list[Rung] = []
    if isinstance(class_name, str) and class_name:
        class_key = ObjectKey(GATEWAY_GROUP, "GatewayClass", "", class_name)
        if view.get(class_key) is not None:
            rungs.append(Rung(class_key))
    return (*rungs, namespace_rung(key.namespace), Rung(key))


def listener_set_attached(
    ls: ObjectKey, obj: Mapping[str, Any], view: ClusterView
) -> tuple[ObjectKey, Mapping[str, Any]] | None:
    """The Gateway a ListenerSet attaches to, when that Gateway's allowedListeners admit it."""
    gw_key = listener_set_parent(ls, obj)
    gw = view.get(gw_key) if gw_key is not None else None
    if gw_key is None or gw is None:
        return None
    allowed = spec_mapping(gw).get("allowedListeners")
    namespaces = allowed.get("namespaces") if isinstance(allowed, Mapping) else None
    if not namespace_admitted(
        namespaces, owner_ns=gw_key.namespace, ns=ls.namespace, view=view, default="None"
    ):
        return None
    return gw_key, gw


def _listener_set_contexts(
    key: ObjectKey, obj: Mapping[str, Any], view: ClusterView
) -> list[Context]:
    attached = listener_set_attached(key, obj, view)
    if attached is None:
        return []
    gw_key, gw = attached
    return [(*_gateway_root(gw_key, gw, view), namespace_rung(key.namespace), Rung(key))]


# What a parentRef gives a route depends on the route's namespace and kind, not its name:
# routes sharing a parent share the work (10,000 routes on one Gateway is a real shape).
ParentMemo = dict[tuple[ParentRef, str, str], tuple[Context, ...]]


def _route_contexts(
    key: ObjectKey, obj: Mapping[str, Any], view: ClusterView, memo: StructureMemo
) -> list[Context]:
    out: list[Context] = []
    tail = (namespace_rung(key.namespace), Rung(key))
    parents = memo.parents
    for ref in parent_refs(key, obj, memo.keys):
        memo_key = (ref, key.namespace, key.kind)
        if memo_key not in parents:
            found = _parent_contexts(ref, key, view)
            parents[memo_key] = tuple(_kept_once(context, memo) for context in found)
        out.extend((*parent, *tail) for parent in parents[memo_key])
    return out


def _kept_once(context: Context, memo: StructureMemo) -> Context:
    """The equal context the memo already holds (`heads`), else the context with each rung
    replaced by the equal one it holds (`rungs`): a Gateway's listener contexts are made again
    for every namespace and kind of route that names it, alike but where a listener does not
    admit the route."""
    kept = memo.heads.get(context)
    if kept is None:
        rungs = memo.rungs
        kept = memo.heads[context] = tuple([rungs.setdefault(rung, rung) for rung in context])
    return kept


def _parent_contexts(ref: ParentRef, route: ObjectKey, view: ClusterView) -> list[Context]:
    """The contexts a parentRef gives the route, ending at the listener (or mesh Service)."""
    parent = view.get(ref.key)
    if parent is None:
        return []
    gk = ref.key.group_kind
    if gk == kinds.SERVICE:
        return [_standalone(ref.key)]
    if gk == kinds.GATEWAY:
        roots = [_gateway_root(ref.key, parent, view)]
    elif gk == kinds.LISTENER_SET:
        roots = _listener_set_contexts(ref.key, parent, view)
    else:
        return []
    out: list[Context] = []
    for listener in kinds.section_items(gk, parent):
        name = listener.get("name")
        if not isinstance(name, str) or (ref.section is not None and name != ref.section):
            continue
        if listener_admits(listener, owner_ns=ref.key.namespace, route=route, view=view):
            out.extend((*root, Rung(ref.key, name)) for root in roots)
    return out


def _service_contexts(
    key: ObjectKey, view: ClusterView, memo: StructureMemo
) -> tuple[Context, ...]:
    """A Service's contexts, kept by route (`_service_parts`)."""
    obj = view.get(key)
    if obj is None:
        return ()
    return _service_parts(key, obj, view, memo).ordered or (_standalone(key),)


def _service_parts(
    key: ObjectKey,
    obj: Mapping[str, Any],
    view: ClusterView,
    memo: StructureMemo,
    *,
    limit: int | None = None,
) -> ServiceParts:
    """A Service's contexts, route by route: one per (route context, backendRef to it).

    Made whole once; then a route's write (`memo.StoreMemo`) marks its part pending, and only
    that part is made again and put in place: a route event beside 10,000 others on the same
    Service costs a few comparisons (`bisect`), not a sort of 20,000 contexts. With `limit`,
    at most that many pending parts are made; the rest stay pending (`advance_by_route`).
    """
    parts = memo.services.get(key)
    if parts is not None and not parts.pending:
        return parts
    ports, standalone = _port_rungs(key, obj), _standalone(key)
    routes_here = index_of(view).routes_of_backend(key)
    if parts is None:
        parts = memo.services[key] = ServiceParts()
        for route in sorted(routes_here):
            found = _service_part(key, route, ports, standalone, view, memo)
            if found:
                parts.by_route[route] = found
        parts.ordered = tuple(sorted(_chain(parts.by_route.values()), key=_context_order))
        return parts
    ordered = list(parts.ordered)
    pending = parts.pending or set()
    batch = pending_batch(pending, limit)
    for route in batch:
        for context in parts.by_route.pop(route, ()):
            at = bisect.bisect_left(ordered, _context_order(context), key=_context_order)
            del ordered[at]  # parts never share a context: each holds its route's rung
        found = (
            _service_part(key, route, ports, standalone, view, memo) if route in routes_here else ()
        )
        if found:
            parts.by_route[route] = found
            for context in found:
                bisect.insort(ordered, context, key=_context_order)
    parts.pending = pending.difference(batch) or None
    parts.ordered = tuple(ordered)
    return parts


def _chain(parts: Iterable[Sequence[Context]]) -> list[Context]:
    return [context for part in parts for context in part]


def _port_rungs(key: ObjectKey, obj: Mapping[str, Any]) -> dict[int, Rung]:
    """The rung of each named port of a Service, by number: made once per Service, and shared
    by every context that ends at that port (one per route and backendRef)."""
    ports: dict[int, Rung] = {}
    for item in kinds.section_items(kinds.SERVICE, obj):
        number, name = item.get("port"), item.get("name")
        if isinstance(number, int) and isinstance(name, str) and name and number not in ports:
            ports[number] = Rung(key, name)
    return ports


def _service_part(
    key: ObjectKey,
    route: ObjectKey,
    ports: Mapping[int, Rung],
    standalone: Context,
    view: ClusterView,
    memo: StructureMemo,
) -> tuple[Context, ...]:
    """The Service's contexts through one route, sorted: one per (route context, backendRef)."""
    return tuple(sort_contexts(_contexts_through(key, route, ports, standalone, view, memo)))


def _contexts_through(
    key: ObjectKey,
    route: ObjectKey,
    ports: Mapping[int, Rung],
    standalone: Context,
    view: ClusterView,
    memo: StructureMemo,
) -> list[Context]:
    route_obj = view.get(route)
    if route_obj is None:
        return []
    refs = [
        b
        for b in _backends(route, route_obj, memo)
        if b.key == key and backend_allowed(route, b, view)
    ]
    if not refs:
        return []
    # What follows the route's context, per backendRef: built once, shared by every context.
    tails = []
    for ref in refs:
        rule = (Rung(route, ref.rule),) if ref.rule else ()
        port = ports.get(ref.port) if ref.port is not None else None
        tails.append((*rule, *standalone, *((port,) if port else ())))
    return [(*ctx, *tail) for ctx in _known_contexts(route, view, memo) for tail in tails]


# --- the reverse: what lies below a rung ------------------------------------------------------


def affected_by(
    target: ObjectKey, section: str | None, view: ClusterView, *, inherited: bool = True
) -> set[ObjectKey]:
    """Annotatable objects with a context through (target, section): who a policy there reaches.

    With `inherited=False` (a Direct kind) only the target itself. Used for fan-out; also
    right for hierarchy changes: a Namespace's labels or ReferenceGrants → `Namespace/<ns>`;
    a changed route or Gateway → the union over the views before and after the change.
    """
    view = hierarchy_view(view)  # what lies below a rung is structure only
    structure = shared_structure(view)
    if structure is None:  # no memo to keep it (an overlaid Gateway): walked once, unordered
        return _affected_by(target, section, view, inherited, structure_of(view))
    return set(_kept_reach(target, section, view, inherited, structure))


def reach_in_order(
    target: ObjectKey, section: str | None, view: ClusterView, *, inherited: bool = True
) -> tuple[ObjectKey, ...]:
    """`affected_by`, in `kinds.in_ladder_order`: an impact preview shows the first 25
    objects of a reach of thousands and counts the rest, without sorting them per review."""
    view = hierarchy_view(view)
    structure = shared_structure(view)
    if structure is None:
        found = _affected_by(target, section, view, inherited, structure_of(view))
        return tuple(kinds.in_ladder_order(found))
    return _kept_reach(target, section, view, inherited, structure)


def _kept_reach(
    target: ObjectKey,
    section: str | None,
    view: ClusterView,
    inherited: bool,
    structure: StructureMemo,
) -> tuple[ObjectKey, ...]:
    """Who lies below a rung is structure only: kept until a route below it or a hierarchy
    object changes (`StructureMemo.forget_route`), so a wide policy's impact preview and
    fan-out walk the tree once, not on every review; kept in ladder order, sorted once when
    walked. Below a route lie its own Services, read from the route: walked each time, not
    kept, so that the reach of each route written (every route event asks for it) does not
    pile up for the next write to sift through."""
    ordered = structure.reach.get((target, section, inherited))
    if ordered is None:
        found = _affected_by(target, section, view, inherited, structure)
        ordered = tuple(kinds.in_ladder_order(found))
        if target.group_kind not in kinds.ROUTE_KINDS:
            structure.remember_reach((target, section, inherited), ordered)
    return ordered


def _affected_by(
    target: ObjectKey,
    section: str | None,
    view: ClusterView,
    inherited: bool,
    memo: StructureMemo,
) -> set[ObjectKey]:
    out: set[ObjectKey] = set()
    present = view.get(target) is not None
    if target.group_kind in kinds.ANNOTATED_KINDS and present:
        out.add(target)
    if not inherited or (not present and target.group_kind in kinds.ROUTE_KINDS):
        # What lies below a route is read from the route itself (its backendRefs): an absent
        # route has nothing below it. The common case of a route's create or delete, whose
        # view without it would otherwise build an index of its own to find that out.
        return out
    index = index_of(view)
    # Below the first rung every rung is a whole object (`Rung(key)`), so the walk goes by key:
    # one visit per object, and no Rung built for each of the thousands it passes.
    # Most of its visits are routes and the Services behind them, dispatched here by name: a
    # GroupKind built per visit was about a twentieth of the walk (py-spy).
    seen: set[ObjectKey] = set()
    frontier = list(_children(Rung(target, section), view, index, memo))
    while frontier:
        key = frontier.pop()
        if key in seen:
            continue
        seen.add(key)
        kind = key.kind
        if kind == "Service" and not key.group:
            if index.routes_of_parent(key):  # a mesh route's parent (GAMMA): rare
                frontier.extend(_children(Rung(key), view, index, memo))
        elif (key.group, kind) in kinds.ROUTE_KINDS:  # a GroupKind is a tuple: a plain one finds it
            frontier.extend(_route_children(key, None, view, memo))
        else:
            frontier.extend(_children(Rung(key), view, index, memo))
    out |= seen
    return out


def _route_children(
    key: ObjectKey, rule: str | None, view: ClusterView, memo: StructureMemo
) -> list[ObjectKey]:
    """The Services behind a route (or one of its rules), each admitted there."""
    get = view.get
    obj = get(key)
    if obj is None or not _known_contexts(key, view, memo):
        return []
    return [
        backend.key
        for backend in _backends(key, obj, memo)
        if (rule is None or backend.rule == rule)
        and get(backend.key) is not None
        and backend_allowed(key, backend, view)
    ]


def _children(
    rung: Rung, view: ClusterView, index: HierarchyIndex, memo: StructureMemo
) -> list[ObjectKey]:
    """The objects one level below `rung`, each admitted there.

    A walk visits thousands of routes: it reads the structure memo it was given directly
    (its tuples, not the copies `contexts_of` hands out), and fills it as it goes.
    """
    key = rung.key
    gk = key.group_kind
    get = view.get
    if gk in kinds.ROUTE_KINDS:
        return _route_children(key, rung.section, view, memo)
    if gk == kinds.SERVICE or gk == kinds.GATEWAY or gk == kinds.LISTENER_SET:
        found = [
            route
            for route in index.routes_of_parent(key)
            if any(rung in ctx for ctx in _known_contexts(route, view, memo))
        ]
        if gk == kinds.GATEWAY and rung.section is None:
            for ls in index.listener_sets_of(key):
                obj = get(ls)
                if obj is not None and listener_set_attached(ls, obj, view) is not None:
                    found.append(ls)
        return found
    if gk == kinds.NAMESPACE:
        return [k for k in index.in_namespace(key.name) if get(k) is not None]
    if gk == kinds.GATEWAY_CLASS:
        return [k for k in index.gateways_of_class(key.name) if get(k) is not None]
    return []
