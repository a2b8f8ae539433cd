"""`ServeConfig`: everything `serve`'s flags say, as one typed, frozen value.

Built once from the parsed command line (`cli.serve.serve_config_from`) and handed to the
wiring — the server's (`cli.serve`) and the cluster side's (`cluster.live`) — so that they
read named, typed fields rather than an `argparse.Namespace`, and nothing downstream can
change them. It lives at the bottom of the shell because both of those read it.
A new flag of `serve` is a new field here; a test holds the two lists equal. No defaults:
the flags own them (and the environment variables that set them).
"""

from __future__ import annotations

from dataclasses import dataclass

from webhook.core.admission.decisions import LogDecisions


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeConfig:
    # HTTPS and TLS
    host: str
    port: int
    tls_cert_file: str | None
    tls_key_file: str | None
    client_ca_file: str | None
    self_signed_dir: str | None
    insecure_dev_plaintext: bool
    tls_poll_seconds: float
    # Where state comes from: files (cluster-less), else the API server
    manifests: tuple[str, ...]
    kubeconfig: str | None
    # The replica that leads, and what it writes
    leader_election_namespace: str
    leader_election_name: str
    lease_duration_seconds: float
    no_reconcile: bool
    reconcile_qps: float
    reconcile_burst: int
    reconcile_workers: int
    resync_seconds: float
    no_sync_webhook_rules: bool
    no_policy_reports: bool
    webhook_configuration: str
    webhook_rules_sync_seconds: float
    cache_max_objects: int
    # Health and shutdown
    max_state_age_seconds: float
    drain_seconds: float
    shutdown_delay_seconds: float
    # Logs and Events
    log_level: str
    log_format: str
    log_bodies: bool
    log_decisions: LogDecisions
    events: bool
