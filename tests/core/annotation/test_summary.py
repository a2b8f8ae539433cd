"""The annotation value (SPEC §3.3): schema v1 byte for byte, grouping, determinism, size cap."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fixtures.budget import examples
from tests.fixtures.engine import CLUSTER, CRDS, docs, gateway, route, service, store_of
from webhook.core.annotation import summary
from webhook.core.engine import effective
from webhook.core.model.settings import Settings
from webhook.core.state.store import Store

SPEC_EXAMPLE_POLICIES = """
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {name: gw-retry, namespace: infra}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  override: {maxRetries: 3}
---
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {name: r-retry, namespace: apps}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}]
  default: {retryOn: ["502"]}
"""


def test_the_value_is_schema_v1_compact_with_sorted_keys() -> None:
    store = store_of(CRDS, CLUSTER, SPEC_EXAMPLE_POLICIES)
    value = summary.summarize(route("apps", "r"), store, Settings())
    assert value == (
        '{"policies":{"RetryPolicy.policies.example.com":{"contexts":[{'
        '"effective":{"maxRetries":3,"retryOn":["502"]},'
        '"paths":[["GatewayClass/acme","Gateway/infra/gw#https","HTTPRoute/apps/r"]],'
        '"sources":{"/maxRetries":{"at":"Gateway/infra/gw","policy":"infra/gw-retry","stanza":"override"},'
        '"/retryOn":{"at":"HTTPRoute/apps/r","policy":"apps/r-retry","stanza":"default"}}}],'
        '"policies":["apps/r-retry","infra/gw-retry"]}},'
        '"truncated":false,"version":1}'
    )


def test_no_policy_no_value() -> None:
    assert summary.summarize(route("apps", "r"), store_of(CRDS, CLUSTER), Settings()) is None
    assert summary.summarize(route("apps", "missing"), store_of(CRDS, CLUSTER), Settings()) is None


def test_a_gateway_shows_itself_and_each_listener_a_policy_targets() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        """
        apiVersion: policies.example.com/v1alpha1
        kind: ColorPolicy
        metadata: {name: all, namespace: infra}
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
          default: {color: red}
        ---
        apiVersion: policies.example.com/v1alpha1
        kind: ColorPolicy
        metadata: {name: tls, namespace: infra}
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: https}]
          default: {color: green}
        """,
    )
    value = json.loads(summary.summarize(gateway("infra", "gw"), store, Settings()) or "")
    contexts = value["policies"]["ColorPolicy.policies.example.com"]["contexts"]
    assert [(c["paths"], c["effective"], c["sources"]["/color"]["at"]) for c in contexts] == [
        ([["GatewayClass/acme", "Gateway/infra/gw"]], {"color": "red"}, "Gateway/infra/gw"),
        (
            [["GatewayClass/acme", "Gateway/infra/gw#https"]],
            {"color": "green"},
            "Gateway/infra/gw#https",
        ),
    ]


MANY_LISTENERS = 12


def _many_listeners(distinct: bool) -> Store:
    """A route on every listener of a Gateway; with `distinct`, each listener its own colour."""
    listeners = ", ".join(
        f"{{name: l{i:02}, port: {8000 + i}, protocol: HTTP, allowedRoutes: {{namespaces: {{from: All}}}}}}"
        for i in range(MANY_LISTENERS)
    )
    text = f"""
    apiVersion: gateway.networking.k8s.io/v1
    kind: Gateway
    metadata: {{name: wide, namespace: infra}}
    spec: {{gatewayClassName: acme, listeners: [{listeners}]}}
    ---
    apiVersion: gateway.networking.k8s.io/v1
    kind: HTTPRoute
    metadata: {{name: everywhere, namespace: apps}}
    spec: {{parentRefs: [{{name: wide, namespace: infra}}]}}
    ---
    apiVersion: policies.example.com/v1alpha1
    kind: ColorPolicy
    metadata: {{name: base, namespace: infra}}
    spec:
      targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: wide}}]
      default: {{color: grey}}
    """
    if distinct:
        for i in range(MANY_LISTENERS):
            text += f"""
    ---
    apiVersion: policies.example.com/v1alpha1
    kind: ColorPolicy
    metadata: {{name: l{i:02}, namespace: infra}}
    spec:
      targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: wide, sectionName: l{i:02}}}]
      default: {{color: c{i:02}}}
    """
    return store_of(CRDS, CLUSTER, text)


def test_contexts_alike_in_effective_and_sources_are_one_entry_with_sorted_paths() -> None:
    value = json.loads(
        summary.summarize(route("apps", "everywhere"), _many_listeners(False), Settings()) or ""
    )
    (entry,) = value["policies"]["ColorPolicy.policies.example.com"]["contexts"]
    assert entry["paths"] == [
        ["GatewayClass/acme", f"Gateway/infra/wide#l{i:02}", "HTTPRoute/apps/everywhere"]
        for i in range(MANY_LISTENERS)
    ]
    assert entry["effective"] == {"color": "grey"}


def test_over_the_cap_sources_go_first() -> None:
    store = _many_listeners(True)
    full = summary.summarize(route("apps", "everywhere"), store, Settings()) or ""
    cap = len(full.encode()) - 1
    value = json.loads(
        summary.summarize(route("apps", "everywhere"), store, Settings(annotation_max_bytes=cap))
        or ""
    )
    assert value["truncated"] is True
    contexts = value["policies"]["ColorPolicy.policies.example.com"]["contexts"]
    assert len(contexts) == MANY_LISTENERS
    assert all("sources" not in c for c in contexts)


def test_the_cap_counts_utf8_bytes_not_characters() -> None:
    """SPEC §3.3: at most the cap in bytes, as the API server counts an annotation. A value
    holding non-ASCII text is kept whole at exactly its size in UTF-8 and cut one byte below,
    where its length in characters is well below both."""
    store = _many_listeners(True)
    store.upsert(
        docs(
            """
            apiVersion: policies.example.com/v1alpha1
            kind: ColorPolicy
            metadata: {name: label, namespace: apps}
            spec:
              targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: everywhere}]
              default: {label: "Grüße, äöü — ß"}
            """
        )[0]
    )
    key = route("apps", "everywhere")
    full = summary.summarize(key, store, Settings()) or ""
    size = len(full.encode())
    assert "Grüße" in full and len(full) < size
    assert summary.summarize(key, store, Settings(annotation_max_bytes=size)) == full
    cut = summary.summarize(key, store, Settings(annotation_max_bytes=size - 1)) or ""
    assert json.loads(cut)["truncated"] is True and len(cut.encode()) <= size - 1


def test_then_contexts_go_and_policies_always_stay() -> None:
    store = _many_listeners(True)
    for cap in (1200, 700, 10):
        text = (
            summary.summarize(
                route("apps", "everywhere"), store, Settings(annotation_max_bytes=cap)
            )
            or ""
        )
        value = json.loads(text)
        kind = value["policies"]["ColorPolicy.policies.example.com"]
        assert value["truncated"] is True
        assert kind["policies"] == sorted(
            ["infra/base", *(f"infra/l{i:02}" for i in range(MANY_LISTENERS))]
        )
        assert len(kind["contexts"]) < MANY_LISTENERS
        if kind["contexts"]:
            assert len(text.encode()) <= cap
    tiny = json.loads(
        summary.summarize(route("apps", "everywhere"), store, Settings(annotation_max_bytes=10))
        or ""
    )
    assert tiny["policies"]["ColorPolicy.policies.example.com"]["contexts"] == []


RICH = """
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {name: zz, namespace: infra, creationTimestamp: "2024-05-01T10:00:00Z"}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  override: {retryOn: ["501"]}
  default: {perStatus: [{code: 503, maxRetries: 2}]}
---
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {name: aa, namespace: infra, creationTimestamp: "2024-05-01T10:00:00Z"}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  override: {retryOn: ["502"]}
  default: {perStatus: [{code: 503, backoff: 1s}, {code: 500, maxRetries: 1}]}
---
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {name: section, namespace: infra}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: https}]
  default: {maxRetries: 4, headers: {a: b}}
---
apiVersion: policies.example.com/v1alpha1
kind: TimeoutPolicy
metadata: {name: apps, namespace: apps}
spec:
  targetRefs: [{group: "", kind: Namespace, name: apps}]
  default: {timeout: 10s}
---
apiVersion: policies.example.com/v1alpha1
kind: TimeoutPolicy
metadata: {name: foo, namespace: apps}
spec:
  targetRefs: [{group: "", kind: Service, name: foo}, {group: "", kind: Service, name: foo, sectionName: https}]
  override: {timeout: 3s}
---
apiVersion: policies.example.com/v1alpha1
kind: HealthCheckPolicy
metadata: {name: hc-b, namespace: apps}
spec:
  targetRefs: [{group: "", kind: Service, name: foo}]
  path: /b
---
apiVersion: policies.example.com/v1alpha1
kind: HealthCheckPolicy
metadata: {name: hc-a, namespace: apps}
spec:
  targetRefs: [{group: "", kind: Service, name: foo}]
  path: /a
"""
EVERY_DOC = docs(CRDS) + docs(CLUSTER) + docs(RICH)
OBSERVED = [
    route("apps", "r"),
    gateway("infra", "gw"),
    service("apps", "foo"),
    service("apps", "bar"),
]


def _values(order: list[dict[str, object]]) -> list[str | None]:
    store = Store()
    for doc in order:
        store.upsert(doc)
    return [summary.summarize(key, store, Settings()) for key in OBSERVED]


REFERENCE = _values(EVERY_DOC)


@settings(max_examples=examples(40), deadline=None)
@given(st.permutations(EVERY_DOC))
def test_the_value_does_not_depend_on_load_order(order: list[dict[str, object]]) -> None:
    assert _values(order) == REFERENCE


def test_the_rich_scenario_is_not_trivial() -> None:
    route_value = json.loads(REFERENCE[0] or "")
    assert route_value["policies"]["RetryPolicy.policies.example.com"]["contexts"][0][
        "effective"
    ] == {
        "retryOn": ["502"],
        "maxRetries": 4,
        "headers": {"a": "b"},
        "perStatus": [
            {"code": 500, "maxRetries": 1},
            {"code": 503, "maxRetries": 2, "backoff": "1s"},
        ],
    }
    foo = json.loads(REFERENCE[2] or "")
    assert set(foo["policies"]) == {
        "HealthCheckPolicy.policies.example.com",
        "RetryPolicy.policies.example.com",
        "TimeoutPolicy.policies.example.com",
    }


def test_the_value_assembled_from_pieces_is_the_value_dumped_whole() -> None:
    """The cache replaces one kind's piece in place: assembling must give the same bytes as
    dumping the whole value, and each span must hold exactly its kind's piece."""
    store = Store()
    for doc in EVERY_DOC:
        store.upsert(doc)
    for key in OBSERVED:
        results = effective.compute(key, store, with_losers=False)
        pieces = summary.pieces_of(results)
        value, spans = summary.assemble(pieces)
        assert summary.text(value) == summary.dump(summary.summary_value(results))
        assert len(pieces) > 0 and summary.pieces_in(value or (), spans) == pieces
        for result in results:  # each piece is its kind's entry dumped whole, once joined
            whole = summary.dump(
                summary.summary_value([result])["policies"][str(result.group_kind)]
            )
            assert "".join(pieces[str(result.group_kind)]) == whole
    assert summary.assemble({}) == (None, summary.NO_SPANS)


def test_values_hold_each_answer_s_json_each_kind_s_name_and_each_path_as_one_string_for_all() -> (
    None
):
    """An answer's `effective` and `sources` (the same board, met by several objects), a
    kind's name, and a printed path (listed by each kind that reaches the object through it,
    and again whenever a piece is made anew) are one string every value refers to."""
    store = Store()
    for doc in EVERY_DOC:
        store.upsert(doc)
    dumps: summary.Dumps = {}
    held: dict[str, list[str]] = {}
    for _ in range(2):  # the second time with the engine's JSON of boards made afresh
        for key in OBSERVED:
            value, _ = summary.assemble(
                summary.pieces_of(effective.compute(key, store, with_losers=False), dumps)
            )
            for fragment in value or ():
                if fragment.startswith(('{"effective":', '],"sources":', '"', ',"', '["')):
                    held.setdefault(fragment, []).append(fragment)
        dumps = {}
    shared = [same for same in held.values() if len(same) > 1]
    assert any(same[0].startswith('{"effective":') for same in shared)  # a board met twice
    assert any(same[0].startswith('],"sources":') for same in shared)
    assert any(same[0].endswith('.com":') for same in shared)  # a kind's name
    assert any(same[0].startswith('["') for same in shared)  # a path
    assert all(all(fragment is same[0] for fragment in same) for same in shared)


def test_a_path_is_held_as_its_head_and_its_last_entry_each_shared() -> None:
    """A printed path is its head, which every object below the same rungs lists alike, and
    its last entry, which every path of the object ends with: two strings that values share,
    not one string per path that holds a copy of the head each."""
    store = Store()
    for doc in EVERY_DOC:
        store.upsert(doc)
    heads: dict[str, list[str]] = {}
    lasts: dict[str, list[str]] = {}
    for key in OBSERVED:
        value, _ = summary.assemble(
            summary.pieces_of(effective.compute(key, store, with_losers=False))
        )
        for head, last in itertools.pairwise(value or ()):
            if head.startswith('["') and head.endswith(","):
                assert last.endswith('"]') and json.loads(head + last)  # one path, joined
                heads.setdefault(head, []).append(head)
                lasts.setdefault(last, []).append(last)
    assert any(len(same) > 1 for same in heads.values())
    assert any(len(same) > 1 for same in lasts.values())
    for held in (heads, lasts):
        assert all(all(fragment is same[0] for fragment in same) for same in held.values())


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.text(alphabet='a",\\/#é\n', max_size=6), min_size=1, max_size=4))
def test_a_path_cut_in_two_is_its_json_whatever_its_entries_hold(entries: list[str]) -> None:
    """Entries holding quotes, commas or backslashes (an entry `,` is written `","`, as two
    entries are joined) never move the cut off the boundary between the last two entries."""
    path = tuple(entries)
    fragments = summary._path_fragments(path)
    assert "".join(fragments) == summary.dump(path)
    if len(path) > 1:
        assert fragments[-1] == summary.dump(path[-1]) + "]"


def test_every_value_names_its_kinds_with_the_same_strings() -> None:
    """A leader's cache keeps the spans of every object it annotates: the kinds' names in them
    are one string per kind, not one per value."""
    store = Store()
    for doc in EVERY_DOC:
        store.upsert(doc)
    names: dict[str, list[str]] = {}
    for key in OBSERVED:
        pieces = summary.pieces_of(effective.compute(key, store, with_losers=False))
        for name in summary.assemble(pieces)[1].names:
            names.setdefault(name, []).append(name)
    assert any(len(same) > 1 for same in names.values())  # a kind that reaches several objects
    assert all(all(name is same[0] for name in same) for same in names.values())


def test_values_with_the_same_kinds_share_one_tuple_of_their_names() -> None:
    store = Store()
    for doc in EVERY_DOC:
        store.upsert(doc)
    kept: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    for key in OBSERVED:
        pieces = summary.pieces_of(effective.compute(key, store, with_losers=False))
        names = summary.assemble(pieces)[1].names
        kept.setdefault(names, []).append(names)
    assert any(len(same) > 1 for same in kept.values())
    assert all(all(names is same[0] for names in same) for same in kept.values())


def test_values_laid_out_alike_share_one_spans() -> None:
    """Where each kind's piece lies is kept per cached value; objects whose contexts are alike
    have values laid out alike (at the benchmark's 1x, 2,600 distinct among 14,800), and they
    hold one `Spans` between them."""
    store = Store()
    for doc in EVERY_DOC:
        store.upsert(doc)
    kept: dict[summary.Spans, list[summary.Spans]] = {}
    for key in OBSERVED:
        pieces = summary.pieces_of(effective.compute(key, store, with_losers=False))
        spans = summary.assemble(pieces)[1]
        kept.setdefault(spans, []).append(spans)
    assert any(len(same) > 1 for same in kept.values())
    assert all(all(spans is same[0] for spans in same) for same in kept.values())


# --- cutting to the cap (SPEC §3.3), against an oracle that dumps every candidate ----------------


def test_the_cap_is_16_kib_unless_configured() -> None:
    assert Settings().annotation_max_bytes == 16 * 1024


CONTEXT = {"effective": {"n": 1}, "paths": [["Gateway/infra/gw"]]}
CONTEXTS = st.lists(
    st.builds(
        lambda paths, n: {
            "effective": {"n": n},
            "paths": [["Gateway/infra/gw", f"HTTPRoute/apps/{p}"] for p in sorted(set(paths))],
            "sources": {"/n": {"at": "Gateway/infra/gw", "policy": "infra/p", "stanza": "default"}},
        },
        st.lists(st.text("abcé", min_size=1, max_size=12), min_size=1, max_size=3),
        st.integers(0, 10**6),
    ),
    max_size=6,
)
VALUES = st.dictionaries(
    st.sampled_from(["ColorPolicy.p.io", "RetryPolicy.p.io", "TimeoutPolicy.p.io"]),
    st.builds(lambda contexts: {"contexts": contexts, "policies": ["infra/p"]}, CONTEXTS),
    min_size=1,
)


def without_sources(kinds: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {
        name: [{k: v for k, v in c.items() if k != "sources"} for c in entry["contexts"]]
        for name, entry in kinds.items()
    }


def size_without(kinds: dict[str, Any], dropped: int) -> int:
    """The size of the value without sources and without the last `dropped` contexts (the
    last kind's last first), dumped whole."""
    contexts = without_sources(kinds)
    for name in sorted(contexts, reverse=True):
        while contexts[name] and dropped:
            contexts[name].pop()
            dropped -= 1
    policies = {n: {"contexts": c, "policies": kinds[n]["policies"]} for n, c in contexts.items()}
    return len(summary.dump({"version": 1, "policies": policies, "truncated": True}).encode())


def assert_cut_right(kinds: dict[str, Any], cap: int, cut: dict[str, Any]) -> None:
    """What stays is, kind by kind in name order, a prefix of its contexts without sources,
    every earlier kind whole and every later one empty; within the cap unless nothing is left
    to drop; and one more context kept would not fit. Each candidate is dumped whole."""
    assert cut["truncated"] is True and cut["version"] == 1
    names = sorted(kinds)
    full = without_sources(kinds)
    kept = [len(cut["policies"][name]["contexts"]) for name in names]
    for name, n in zip(names, kept, strict=True):
        assert cut["policies"][name]["policies"] == kinds[name]["policies"]
        assert cut["policies"][name]["contexts"] == full[name][:n], "not a prefix"
    partial = [i for i, name in enumerate(names) if kept[i] < len(full[name])]
    if partial:
        assert not any(kept[partial[0] + 1 :]), "a later kind kept contexts"
    assert len(summary.dump(cut).encode()) <= cap or not any(kept), "over the cap"
    if partial:
        i = partial[0]
        one_more = json.loads(summary.dump(cut))
        one_more["policies"][names[i]]["contexts"] = full[names[i]][: kept[i] + 1]
        assert len(summary.dump(one_more).encode()) > cap, "a context dropped that would fit"


@settings(max_examples=examples(200), deadline=None)
@given(
    kinds=VALUES,
    cap=st.integers(0, 3_000),
    at=st.integers(0, 12),
    nudge=st.sampled_from([-1, 0, 1, None]),
)
def test_a_value_over_the_cap_loses_sources_then_the_last_contexts_and_no_more(
    kinds: dict[str, Any], cap: int, at: int, nudge: int | None
) -> None:
    """Caps are drawn at random, and at a byte of where a cut would land (a miscount shows)."""
    if nudge is not None:
        cap = size_without(kinds, at) + nudge
    value = {"version": 1, "policies": kinds, "truncated": False}
    assert_cut_right(kinds, cap, summary.truncated(value, cap))


@pytest.mark.python_only
def test_the_cut_property_catches_a_miscounted_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not vacuous: a cut that counts each context a byte short drops one too many."""

    def short(contexts: Any, total: int, max_bytes: int, size_of: Any) -> int:
        return real(contexts, total, max_bytes, lambda c: size_of(c) - 1)

    real = summary.drop_to_fit
    monkeypatch.setattr(summary, "drop_to_fit", short)
    kinds = {"ColorPolicy.p.io": {"contexts": [CONTEXT] * 3, "policies": ["infra/p"]}}
    cap = size_without(kinds, 1)
    with pytest.raises(AssertionError, match="a context dropped that would fit"):
        assert_cut_right(kinds, cap, summary.truncated({"policies": kinds}, cap))


def test_a_kind_s_answers_are_ordered_by_their_paths_then_their_json_and_written_from_it() -> None:
    """Each answer is kept as the two strings a context of it is written between; ordering
    by them is ordering by the answer's effective value and then its sources as JSON (a JSON
    object is never the start of another), and the sources made again as data are the ones
    written."""
    store = Store()
    for doc in EVERY_DOC:
        store.upsert(doc)
    dumps: summary.Dumps = {}
    compared = 0
    for key in OBSERVED:
        for result in effective.compute(key, store, with_losers=False):
            ordered = summary._ordered_groups(result, dumps)
            as_json = [
                (paths, summary.dump(done.effective), summary.dump(done.sources_json()))
                for paths, done in ordered
            ]
            assert as_json == sorted(as_json)
            for _, done in ordered:
                assert done.closing == f'],"sources":{summary.dump(done.sources_json())}}}'
            compared += len(ordered) > 1
    assert compared  # some kind has two answers to order


def test_a_list_of_policies_is_one_string_however_many_values_list_it() -> None:
    """Past the bound of `_policies_tail`'s cache (at 8x the default scale, tens of thousands
    of distinct lists) a list made again must still be the one string the values hold."""
    tail = summary._policies_tail(("apps/a", "apps/b"))
    summary._policies_tail.cache_clear()  # as when the cache has let it go
    again = summary._policies_tail(("apps/a", "apps/b"))
    assert again == tail == '],"policies":["apps/a","apps/b"]}'
    assert again is tail
