"""The ladder order in which a policy's reach is kept and previewed (`kinds.in_ladder_order`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from webhook.core.model import kinds
from webhook.core.model.refs import GATEWAY_GROUP, ObjectKey

KINDS = [
    ("", "Service"),
    ("", "ConfigMap"),  # no rung of the ladder: after every rung
    (GATEWAY_GROUP, "GatewayClass"),
    (GATEWAY_GROUP, "Gateway"),
    (GATEWAY_GROUP, "HTTPRoute"),
    (GATEWAY_GROUP, "GRPCRoute"),
    ("example.com", "Gateway"),  # a Gateway of another group is no rung either
]


def by_rank_then_key(key: ObjectKey) -> tuple[int, ObjectKey]:
    """The order spelled out: the index of the key's rung on the ladder (past it: after)."""
    ranks = [i for i, rung in enumerate(kinds.LADDER) if key.group_kind in rung]
    return (ranks[0] if ranks else len(kinds.LADDER), key)


keys = st.builds(
    lambda gk, ns, name: ObjectKey(gk[0], gk[1], ns, name),
    st.sampled_from(KINDS),
    st.sampled_from(["", "a", "b"]),
    st.sampled_from(["x", "y", "z"]),
)


def test_least_specific_first() -> None:
    service = ObjectKey("", "Service", "apps", "a")
    route = ObjectKey(GATEWAY_GROUP, "HTTPRoute", "apps", "z")
    gateway = ObjectKey(GATEWAY_GROUP, "Gateway", "infra", "z")
    other = ObjectKey("", "ConfigMap", "apps", "a")
    assert kinds.in_ladder_order([other, service, route, gateway]) == [
        gateway,
        route,
        service,
        other,
    ]


@given(st.sets(keys))
def test_bucketed_sort_is_the_sort_by_ladder_order(found: set[ObjectKey]) -> None:
    assert kinds.in_ladder_order(found) == sorted(found, key=by_rank_then_key)
