"""Fixtures shared by the unit tests; the YAML builders live in `tests.fixtures.yaml_state`."""

from __future__ import annotations

import pytest

from tests.fixtures.yaml_state import CLUSTER, POLICY_CRDS, store_of
from webhook.core.state.store import Store


@pytest.fixture
def cluster() -> Store:
    """Policy CRDs plus a small cluster: Namespaces, a GatewayClass, Gateway, route, Service."""
    return store_of(POLICY_CRDS, CLUSTER)
