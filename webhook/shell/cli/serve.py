"""`policy-webhook serve`: wire state, server, TLS and (in a cluster) informers and reconciler.

Two sources of state, one server: `--manifests PATH` loads a folder once (cluster-less);
otherwise informers keep the store in step with the API server, and the replica that holds
the Lease reconciles annotations of existing objects. Every replica serves admission.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from webhook.core.admission.decisions import DEFAULT_LOG_DECISIONS, LOG_DECISIONS
from webhook.core.annotation.cache import DEFAULT_MAXSIZE, SummaryCache
from webhook.core.model.profiles import OperatorConfig
from webhook.core.model.settings import Settings
from webhook.core.state.store import Store
from webhook.shell.cli.main import boolean
from webhook.shell.cli.manifests import load_store
from webhook.shell.cluster import pacing  # its defaults only: light, unlike the rest of `cluster`
from webhook.shell.https.endpoints import build_app
from webhook.shell.https.server import run_until_stopped
from webhook.shell.https.tls import CertFiles, ReloadingTLS, TLSConfigError, self_signed
from webhook.shell.process import build, heap, loop_lag
from webhook.shell.process import readiness as ready
from webhook.shell.process.logs import fields, setup_logging
from webhook.shell.process.metrics import Metrics
from webhook.shell.process.readiness import Readiness
from webhook.shell.process.serve_config import ServeConfig

log = logging.getLogger(__name__)


def add_flags(
    parser: argparse.ArgumentParser, *, env: Callable[..., Any], env_bool: Callable[[str], bool]
) -> None:
    add = parser.add_argument

    def typed(flag: str, default: Any, kind: Callable[[str], Any], **kwargs: Any) -> None:
        """A flag of one type, its default read from its variable with that same type."""
        add(flag, type=kind, default=env(flag, default, type=kind), **kwargs)

    add("--host", default=env("--host", "0.0.0.0"), help="address to listen on")
    typed("--port", 8443, int, help="HTTPS port")
    add(
        "--tls-cert-file",
        default=env("--tls-cert-file"),
        help="serving certificate (PEM); re-read when it changes",
    )
    add(
        "--tls-key-file",
        default=env("--tls-key-file"),
        help="private key of the serving certificate (PEM)",
    )
    add("--client-ca-file", default=env("--client-ca-file"),
        help="require client certificates signed by this CA (the API server's)")  # fmt: skip
    add("--self-signed-dir", default=env("--self-signed-dir"),
        help="with no certificate given: write the generated CA and certificate here (default: a temp dir)")  # fmt: skip
    add("--insecure-dev-plaintext", action="store_true", default=env_bool("--insecure-dev-plaintext"),
        help="serve plain HTTP without TLS, for local development only (logs a warning)")  # fmt: skip
    typed("--tls-poll-seconds", 5.0, float,
        help="how often to look for rotated certificate files")  # fmt: skip
    add("--manifests", action="append", default=_split(env("--manifests")), metavar="PATH",
        help="cluster-less: read state from these files/folders instead of the API server")  # fmt: skip
    add("--kubeconfig", default=env("--kubeconfig", os.environ.get("KUBECONFIG")),
        help="kubeconfig to use outside a cluster (default: in-cluster config, else $KUBECONFIG)")  # fmt: skip
    add("--leader-election-namespace", default=env("--leader-election-namespace", os.environ.get("POD_NAMESPACE", "policy-webhook")),
        help="namespace of the Lease that elects the reconciling replica")  # fmt: skip
    add(
        "--leader-election-name",
        default=env("--leader-election-name", "policy-webhook"),
        help="name of that Lease",
    )
    add("--no-reconcile", action="store_true", default=env_bool("--no-reconcile"),
        help="serve admission only; never patch existing objects")  # fmt: skip
    add("--no-sync-webhook-rules", action="store_true", default=env_bool("--no-sync-webhook-rules"),
        help="never patch the rules of the policy webhooks; keep them by hand (docs/install.md)")  # fmt: skip
    add("--no-policy-reports", action="store_true", default=env_bool("--no-policy-reports"),
        help="keep no PolicyReports, even where their CRDs (manifests/components/policy-reports) are served")  # fmt: skip
    add("--webhook-configuration", default=env("--webhook-configuration", "policy-webhook"),
        help="ValidatingWebhookConfiguration whose policy webhooks' rules the leader keeps in step with the readable policy kinds")  # fmt: skip
    typed("--webhook-rules-sync-seconds", 10.0, float,
        help="how often the leader re-checks which policy kinds it may read and those rules (CRD changes: at once)")  # fmt: skip
    typed("--reconcile-qps", pacing.DEFAULT_CEILING, float,
        help="most annotation patches per second the leader may send; less after 429s or slow answers (docs/reliability.md)")  # fmt: skip
    typed("--reconcile-burst", pacing.DEFAULT_BURST, int,
        help="patches that may go at once before --reconcile-qps applies")  # fmt: skip
    typed("--reconcile-workers", pacing.DEFAULT_IN_FLIGHT, int,
        help="objects the leader reconciles at once: at most this many patches in flight")  # fmt: skip
    typed("--resync-seconds", 600.0, float,
        help="how often the leader re-checks every object's annotation (a safety net)")  # fmt: skip
    typed("--cache-max-objects", DEFAULT_MAXSIZE, int,
        help="objects whose annotation value is cached; size it above the annotated objects")  # fmt: skip
    typed("--lease-duration-seconds", 15.0, float,
        help="how long a Lease holder may go silent before another replica takes over")  # fmt: skip
    typed("--max-state-age-seconds", 900.0, float,
        help="readiness fails when no watch has shown life for this long (0: never)")  # fmt: skip
    typed("--drain-seconds", 15.0, float,
        help="on SIGTERM, how long in-flight requests may take to finish")  # fmt: skip
    typed("--shutdown-delay-seconds", 0.0, float,
        help="on SIGTERM, how long to keep serving while /readyz fails, so endpoints drop us first")  # fmt: skip
    levels = ("DEBUG", "INFO", "WARNING", "ERROR")
    add("--log-level", default=env("--log-level", "INFO", type=str.upper, choices=levels),
        type=str.upper, choices=levels)  # any case, as its variable  # fmt: skip
    formats = ("json", "text")
    add("--log-format", default=env("--log-format", "json", choices=formats), choices=formats)
    add("--log-bodies", action="store_true", default=env_bool("--log-bodies"),
        help="add the request and response bodies to the decision lines written (debugging only: they may hold sensitive data)")  # fmt: skip
    add("--log-decisions", default=env("--log-decisions", DEFAULT_LOG_DECISIONS, choices=LOG_DECISIONS), choices=LOG_DECISIONS,
        help="decision log lines of /validate: denied (WARNING), warned (denied and warned, INFO), all (clean allows and /mutate too, DEBUG), none; whatever --log-level says")  # fmt: skip
    add("--events", type=boolean, nargs="?", const=True, default=env("--events", True, type=boolean), metavar="true|false",
        help="cluster mode: record a Kubernetes Event for each denied or warned policy write that is not a dry run; --events=false turns them off")  # fmt: skip


def _split(value: str | None) -> list[str] | None:
    return [part for part in value.split(",") if part] if value else None


def serve_config_from(args: argparse.Namespace) -> ServeConfig:
    """The one place where the parsed flags become the typed value the wiring reads."""
    values = {field.name: getattr(args, field.name) for field in dataclasses.fields(ServeConfig)}
    values["manifests"] = tuple(args.manifests or ())
    return ServeConfig(**values)


def run(serve_config: ServeConfig, *, config: OperatorConfig, settings: Settings) -> int:
    setup_logging(serve_config.log_level, json=serve_config.log_format == "json")
    try:
        asyncio.run(_serve(serve_config, config=config, settings=settings))
    except TLSConfigError as exc:
        log.error("cannot serve TLS: %s", exc)
        return 2
    return 0


def certificate_files(serve_config: ServeConfig) -> CertFiles:
    """The given pair, or a self-signed one whose CA path is logged for the caBundle."""
    if serve_config.tls_cert_file or serve_config.tls_key_file:
        if not (serve_config.tls_cert_file and serve_config.tls_key_file):
            raise TLSConfigError("--tls-cert-file and --tls-key-file go together")
        return CertFiles(Path(serve_config.tls_cert_file), Path(serve_config.tls_key_file))
    directory = serve_config.self_signed_dir or tempfile.mkdtemp(prefix="policy-webhook-tls-")
    files = self_signed(directory)
    log.warning(
        "no certificate given: serving a self-signed one; trust its CA at %s", files.ca_file,
        extra=fields(ca_file=str(files.ca_file)),
    )  # fmt: skip
    return files


async def _serve(serve_config: ServeConfig, *, config: OperatorConfig, settings: Settings) -> None:
    metrics = Metrics()
    readiness = Readiness(ready.TLS, ready.STATE_SYNCED, ready.NOT_DRAINING)
    store = Store(config)
    # Summaries of the store: /mutate's, and in cluster mode the reconciler's as well.
    cache = SummaryCache(store, settings, maxsize=serve_config.cache_max_objects)
    tls: ReloadingTLS | None = None
    files = CertFiles(Path(), Path())
    if not serve_config.insecure_dev_plaintext:
        files = certificate_files(serve_config)
        tls = ReloadingTLS(
            str(files.cert_file), str(files.key_file),
            client_ca_file=serve_config.client_ca_file, poll_interval=serve_config.tls_poll_seconds, metrics=metrics,
        )  # fmt: skip
    heap.tune()
    async with contextlib.AsyncExitStack() as stack:
        lag = asyncio.create_task(loop_lag.probe(metrics.loop_lag.observe), name="loop-lag")
        stack.callback(lag.cancel)
        record_event = None  # Events need a cluster (SPEC 8.2)
        if serve_config.manifests:
            _, where = load_store(serve_config.manifests, store)
            heap.settle("state loaded from manifests")  # before ready: the pause is at start
            readiness.set(ready.STATE_SYNCED, True, f"{len(where)} objects from manifests")
            log.info(
                "state loaded from manifests",
                extra=fields(objects=len(where), paths=serve_config.manifests),
            )
        else:
            from webhook.shell.cluster import live  # kubernetes-asyncio only when a cluster is used

            record_event = await stack.enter_async_context(
                live.running(
                    serve_config,
                    store=store,
                    settings=settings,
                    metrics=metrics,
                    readiness=readiness,
                    cache=cache,
                )
            )
        app = build_app(
            view=store,
            settings=settings,
            readiness=readiness,
            metrics=metrics,
            log_bodies=serve_config.log_bodies,
            log_decisions=serve_config.log_decisions,
            record_event=record_event,
            cache=cache,
        )
        await run_until_stopped(
            app,
            tls=tls,
            readiness=readiness,
            host=serve_config.host,
            port=serve_config.port,
            drain_timeout=serve_config.drain_seconds,
            shutdown_delay=serve_config.shutdown_delay_seconds,
            on_started=lambda server: log.info(
                "serving",
                extra=fields(
                    host=serve_config.host,
                    port=server.port,
                    ca_file=str(files.ca_file or ""),
                    core=build.core_build(),  # "compiled" in the image, "python" in a checkout
                ),
            ),
        )
