"""`explain` of a policy turns the engine's question around; these hold it to the engine's own
answers: what a policy reaches is exactly where each object's effective policy names it."""

from __future__ import annotations

from tests.fixtures.paths import EXAMPLES
from webhook.core.annotation import policy_reach
from webhook.core.engine import effective
from webhook.core.model import kinds
from webhook.core.model.refs import ObjectKey
from webhook.core.state.store import Store
from webhook.shell.cli.manifests import load_store


def example_store() -> Store:
    store, _ = load_store([str(EXAMPLES / "cluster")])
    return store


def annotated_keys(store: Store) -> list[ObjectKey]:
    return sorted(key for gk in kinds.ANNOTATED_KINDS for key in store.keys(gk))


def test_each_context_a_policy_reaches_shows_what_the_object_says_of_that_policy() -> None:
    store = example_store()
    for policy in store.policies():
        for reached in policy_reach.reach(policy, store).objects:
            (result,) = effective.compute(reached.key, store, only=policy.key.group_kind)
            by_path = {ctx.path: ctx for ctx in result.contexts}
            for outcome in reached.outcomes:
                for path in outcome.paths:
                    ctx = by_path[path]
                    assert {(w.pointer, w.stanza, w.at) for w in outcome.wins} == {
                        (at, s.stanza, s.at)
                        for at, s in ctx.sources.items()
                        if s.policy == policy.ref
                    }, (policy.ref, path)
                    assert {(x.field, x.stanza, x.at, x.reason) for x in outcome.losses} == {
                        (x.field, x.stanza, x.at, x.reason)
                        for x in ctx.losers
                        if x.policy == policy.ref
                    }, (policy.ref, path)


def test_every_context_where_an_object_names_a_policy_is_in_that_policys_reach() -> None:
    store = example_store()
    reached = {
        (policy.ref, policy.key.group_kind, r.key, path)
        for policy in store.policies()
        for r in policy_reach.reach(policy, store).objects
        for outcome in r.outcomes
        for path in outcome.paths
    }
    named = {
        (ref, result.group_kind, key, ctx.path)
        for key in annotated_keys(store)
        for result in effective.compute(key, store)
        for ctx in result.contexts
        for ref in {s.policy for s in ctx.sources.values()} | {x.policy for x in ctx.losers}
        if ref is not None
    }
    assert named <= reached
    assert len(named) > 20  # the examples exercise it


# SPEC §4.1's objects, least specific first; routes, one rung, by kind.
LADDER_KINDS = [
    "GatewayClass", "Gateway", "ListenerSet",
    "GRPCRoute", "HTTPRoute", "TCPRoute", "TLSRoute", "UDPRoute",
    "Service",
]  # fmt: skip


def test_reached_objects_come_least_specific_first() -> None:
    store = example_store()
    policy = store.policy(ObjectKey("policies.example.com", "RetryPolicy", "infra", "gw-retry"))
    assert policy is not None
    order = [r.key.kind for r in policy_reach.reach(policy, store).objects]
    assert order[0] == "Gateway" and order[-1] == "Service"
    assert order == sorted(order, key=LADDER_KINDS.index)
