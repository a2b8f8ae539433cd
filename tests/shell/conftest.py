"""Fixtures for the IO shell tests: a trustme CA, the cluster state, and webhooks to run."""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import trustme

from tests.fixtures.https import CLUSTER_YAML, RunningWebhook, load_yaml, write_pair
from webhook.core.admission.decisions import DEFAULT_LOG_DECISIONS, Decision, LogDecisions
from webhook.core.annotation.cache import SummaryCache
from webhook.core.model.settings import Settings
from webhook.core.state.store import Store
from webhook.shell.https import endpoints
from webhook.shell.https.tls import ReloadingTLS
from webhook.shell.process.metrics import Metrics
from webhook.shell.process.readiness import Readiness


@pytest.fixture(scope="session")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="session")
def client_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


@pytest.fixture(scope="session")
def serving_cert(ca: trustme.CA) -> trustme.LeafCert:
    return ca.issue_cert("localhost", "127.0.0.1", "::1")


@pytest.fixture(scope="session")
def cluster() -> Store:
    store = Store()
    for obj in load_yaml(CLUSTER_YAML):
        store.upsert(obj)
    return store


@pytest.fixture(scope="session")
def start_webhook(
    tmp_path_factory: pytest.TempPathFactory,
    serving_cert: trustme.LeafCert,
    client_context: ssl.SSLContext,
    cluster: Store,
) -> Callable[..., RunningWebhook]:
    """Make (not start) a webhook; `with start_webhook(...) as hook:` runs it."""

    def make(
        *,
        log_bodies: bool = False,
        tls: ReloadingTLS | None = None,
        metrics: Metrics | None = None,
        log_decisions: LogDecisions = DEFAULT_LOG_DECISIONS,
        record_event: Callable[[Decision], None] | None = None,
        cache: SummaryCache | None = None,
        **serve_options: Any,
    ) -> RunningWebhook:
        if tls is None:
            cert_file, key_file = write_pair(serving_cert, tmp_path_factory.mktemp("tls"))
            tls = ReloadingTLS(cert_file, key_file, poll_interval=0)
        chosen = metrics or Metrics()

        def app(readiness: Readiness) -> Any:
            return endpoints.build_app(
                view=cluster,
                settings=Settings(),
                readiness=readiness,
                metrics=chosen,
                log_bodies=log_bodies,
                log_decisions=log_decisions,
                record_event=record_event,
                cache=cache,
            )

        return RunningWebhook(app, tls, client_context, **serve_options)

    return make


@pytest.fixture(scope="session")
def webhook(start_webhook: Callable[..., RunningWebhook]) -> Iterator[RunningWebhook]:
    """One webhook for the whole session, for tests that do not stop or reconfigure it."""
    with start_webhook() as running:
        yield running
