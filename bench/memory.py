"""Where a converged leader's memory goes: its state at one size, part by part.

    python -m bench.memory --scale 1 --seed 1     # one JSON object on stdout

The synthetic cluster of `bench.scale`, loaded as the informers load it, every summary computed
and written back (a leader's state once converged, as `bench.scale` reaches it), the heap
settled. Then each part of the state is weighed: the deep size of what it holds
(`sys.getsizeof` over `gc.get_referents`), each Python object counted once, in the first part
that reaches it, in the order of `PARTS` — so the objects in the store are the store's, and what
a memo shares with them (a policy's parts, a key) is not counted again there.

The parts are the webhook's own tables, read by name: this harness knows them as a debugger
would, and a rename fails its test (`tests/bench/test_memory.py`) rather than the page. What no
part reaches — the allocator's free space, garbage that waits for a collection — is the
difference between what the process holds once settled, above what it held at its start, and
the sum counted.
"""

from __future__ import annotations

import argparse
import collections
import gc
import itertools
import json
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

from bench.scale import converge, generate, load, resident_mb, stored_keys
from webhook.core.annotation.cache import DEFAULT_MAXSIZE, SummaryCache
from webhook.core.engine import memo
from webhook.core.model.settings import Settings
from webhook.core.state.store import Store
from webhook.shell.process import heap
from webhook.shell.process.build import core_build

# Not state: shared by every part, or the code itself.
_NOT_STATE = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.CodeType,
)


Roots = Callable[[Store, memo.StoreMemo, SummaryCache], Iterable[Any]]

# (name, what it holds, its roots); in this order, each object counted in the first part that
# reaches it. The store, its memo and the cache themselves are not entered (`measure`): each
# part names its tables, and a table no part names is left out of the sum, not hidden in one.
PARTS: tuple[tuple[str, str, Roots], ...] = (
    (
        "store_objects",
        "objects in the store, trimmed as the informers keep them",
        lambda s, m, c: itertools.chain.from_iterable(
            (*s.keys(gk), *s.objects(gk)) for gk in list(s.all_kinds())
        ),
    ),
    (
        "store_indexes",
        "the store's indexes: by kind, policies by target and selector; its write log",
        lambda s, m, c: [v for name, v in fields(s).items() if name != "memo"],
    ),
    ("hierarchy_index", "the hierarchy index: children by parent", lambda s, m, c: [m._index]),
    (
        "contexts",
        "contexts kept per object (their rungs and keys), busy Services' parts by route",
        lambda s, m, c: [m._structure.contexts, m._structure.services, m._structure.rungs],
    ),
    (
        "refs",
        "routes' parentRefs and backendRefs, as read",
        lambda s, m, c: [m._structure.parents, m._structure.backends],
    ),
    (
        "reach",
        "the objects below rungs already walked",
        lambda s, m, c: [m._structure.reach, m._structure.reach_at],
    ),
    (
        "ladders",
        "per object, its contexts' printed paths, which rungs hold policies, of which kinds",
        lambda s, m, c: [m._ladders],
    ),
    (
        "engine",
        "policies per rung, boards (effective values and sources) and their JSON",
        lambda s, m, c: [m._engine],
    ),
    ("hubs", "busy Services' values in pieces, one per route", lambda s, m, c: [m._hubs]),
    ("memo_rest", "the memo's other tables", lambda s, m, c: [fields(m)]),
    (
        "summary_values",
        "the annotation values, in fragments that values share (`summary.Fragments`)",
        lambda s, m, c: [entry.value for entry in c._entries.values()],
    ),
    (
        "summary_cache",
        "the cache's own bookkeeping: where each kind's piece lies, expiry order, what a "
        "write affects",
        lambda s, m, c: [fields(c)],
    ),
)


def fields(obj: Any) -> dict[str, Any]:
    """An object's attributes by name: its `__dict__` as Python keeps it, or for a class that
    mypyc compiled (the core as the image ships it) the fields its instances hold in place of
    one, which mypyc lists in `__mypyc_attrs__`; a field never set is left out."""
    if hasattr(obj, "__dict__"):
        return dict(vars(obj))
    names: tuple[str, ...] = getattr(type(obj), "__mypyc_attrs__", ())
    missing = object()
    found = {name: getattr(obj, name, missing) for name in names}
    return {name: value for name, value in found.items() if value is not missing}


class _Weigher:
    """Deep sizes, each object counted once across every call."""

    def __init__(self, holders: Iterable[Any] = ()) -> None:
        self._seen: set[int] = {id(holder) for holder in holders}  # never entered

    def weigh(self, roots: Iterable[Any]) -> dict[str, Any]:
        total = 0
        by_type: collections.Counter[str] = collections.Counter()
        count: collections.Counter[str] = collections.Counter()
        stack = list(roots)
        seen = self._seen
        while stack:
            obj = stack.pop()
            if id(obj) in seen or isinstance(obj, _NOT_STATE):
                continue
            seen.add(id(obj))
            size = sys.getsizeof(obj)
            name = type(obj).__name__
            total += size
            by_type[name] += size
            count[name] += 1
            stack.extend(gc.get_referents(obj))
        top = [[name, size, count[name]] for name, size in by_type.most_common(4)]
        return {"bytes": total, "containers": sum(count.values()), "top": top}


def converged_leader(k: float, seed: int) -> tuple[Store, SummaryCache, int]:
    """The state `bench.scale` measures once converged; the objects in the cluster."""
    heap.tune()
    cluster = generate(k, seed, reviews=0)  # in a child: its objects never in this process
    settings = Settings()
    store = Store()
    cache = SummaryCache(store, settings, maxsize=max(DEFAULT_MAXSIZE, len(cluster.keys)))
    with cluster.listing as listed:
        load(listed, store)
    keys = stored_keys(cluster.keys, store)
    heap.settle("benchmark: state loaded")
    memo.index_of(store)
    for key in keys:
        cache.get(key)
    converge(keys, store, cache.get, settings.annotation_key)
    heap.settle("benchmark: state computed")
    return store, cache, cluster.objects


def measure(k: float, seed: int) -> dict[str, Any]:
    baseline = resident_mb()
    store, cache, objects = converged_leader(k, seed)
    held = resident_mb() - baseline  # now, not the peak: the load's copies are gone
    memo.index_of(store)  # the memo, made and caught up on every write
    tables = store.memo
    assert tables is not None
    weigher = _Weigher(holders=(store, tables, cache))
    parts = [
        {"name": name, "what": what, **weigher.weigh(roots(store, tables, cache))}
        for name, what, roots in PARTS
    ]
    counted = sum(part["bytes"] for part in parts)
    return {
        "scale": k,
        "objects": objects,
        "annotated_objects": len(cache._entries),
        "summaries_nonempty": sum(1 for e in cache._entries.values() if e.value is not None),
        "state_rss_mb": held,
        "counted_mb": counted / 1e6,
        "parts": parts,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    result = measure(args.scale, args.seed)
    result["core"] = core_build()  # which build of the core was weighed (`bench` checks it)
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
