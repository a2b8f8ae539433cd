#!/usr/bin/env python3
"""Renew the webhook's serving certificate from inside the cluster (the CronJob of
manifests/components/cert-renewal): what certs/install.sh does, with the CA kept in a Secret.

One run: read the state Secret (CA, its key, the previous CA) and the serving Secret into a
private temporary folder; let certs/generate.py decide, with `--renew-before`, whether anything
is due; then write back what changed, in the order that never leaves a pod untrusted:

  1. the state Secret — the CA key is kept before anything it signed goes live;
  2. `caBundle` of every webhook of both configurations — the new CA (and the previous one,
     during a rotation) is trusted before any pod serves a certificate signed by it;
  3. the serving Secret (`tls.crt`, `tls.key`, and `ca.crt` = the bundle, for scrapers); the
     kubelet swaps the mounted files and the server reloads them, no restart.

A run that is not due writes nothing. A CA within the renewal window is replaced; the old one
stays in the bundle until it expires (generate.py leaves expired ones out), which is the
two-CA rotation of certs/README.md without its manual last step. Standard library and
`cryptography` only (the webhook image has both); talks to the API server with the pod's
service-account token. Every failure exits non-zero, so the Job retries.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import os
import ssl
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import generate  # certs/generate.py, beside this file (the script's folder is on sys.path)
from cryptography import x509

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
STATE_FILES = (generate.CA_CERT, generate.CA_KEY, generate.CA_PREVIOUS)
SERVING_FILES = (generate.TLS_CERT, generate.TLS_KEY)
BUNDLE_KEY = "ca.crt"  # in the serving Secret: the key cert-manager uses for its CA
CONFIGURATIONS = ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class Api:
    """The few requests a run sends, with the service-account token (read once per run)."""

    def __init__(self, server: str, token: str, ca_file: str | None) -> None:
        self.server = server.rstrip("/")
        self.token = token
        self.context = ssl.create_default_context(cafile=ca_file)

    def call(
        self, method: str, path: str, body: object = None, content_type: str = "application/json"
    ) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=30) as response:
                answer = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, exc.read().decode(errors="replace")[:500]) from exc
        return answer if isinstance(answer, dict) else {}

    def get(self, path: str) -> dict[str, Any] | None:
        try:
            return self.call("GET", path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    api = Api(args.server or in_cluster_server(), read_token(args.token_file), args.ca_file)
    secrets = f"/api/v1/namespaces/{args.namespace}/secrets"
    state = api.get(f"{secrets}/{args.state_secret}")
    serving = api.get(f"{secrets}/{args.secret}")
    with tempfile.TemporaryDirectory(prefix="policy-webhook-certs-") as tmp:
        out = Path(tmp) / "out"
        unpack(state, out, STATE_FILES)
        unpack(serving, out, SERVING_FILES)
        drop_expired_previous(out)
        code = generate.main(
            [
                "--service", args.service, "--namespace", args.namespace, "--out", str(out),
                "--days", str(args.days), "--renew-before", str(args.renew_before),
            ]
        )  # fmt: skip
        if code:
            return code
        new_state = pack(out, STATE_FILES)
        bundle = (out / generate.CA_BUNDLE).read_bytes()
        new_serving = {**pack(out, SERVING_FILES), BUNDLE_KEY: encode(bundle)}
    # 1. the CA first, 2. the trust, 3. the certificate that relies on both.
    write_secret(api, secrets, args.state_secret, state, new_state, secret_type="Opaque")
    for kind in CONFIGURATIONS:
        patch_ca_bundle(api, kind, args.webhook_config, encode(bundle))
    write_secret(api, secrets, args.secret, serving, new_serving, secret_type="kubernetes.io/tls")
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--namespace", default=os.environ.get("POD_NAMESPACE", "policy-webhook"),
        help="namespace of the Service and the Secrets (default: the pod's, else policy-webhook)")  # fmt: skip
    add("--service", default="policy-webhook", help="the webhook Service (default policy-webhook)")
    add("--secret", default="policy-webhook-tls",
        help="serving Secret the Deployment mounts (default policy-webhook-tls)")  # fmt: skip
    add("--state-secret", default="policy-webhook-ca",
        help="Secret that keeps the CA and its key between runs (default policy-webhook-ca)")  # fmt: skip
    add("--webhook-config", default="policy-webhook",
        help="name of both webhook configurations (default policy-webhook)")  # fmt: skip
    add("--days", type=generate.positive, default=90,
        help="validity of a new serving certificate (default 90)")  # fmt: skip
    add("--renew-before", type=generate.non_negative, default=30,
        help="renew what expires within this many days (default 30)")  # fmt: skip
    add("--server", help="API server URL (default: in-cluster, from KUBERNETES_SERVICE_HOST)")
    add("--token-file", default=str(SERVICE_ACCOUNT / "token"),
        help="bearer token (default: the pod's service-account token)")  # fmt: skip
    add("--ca-file", default=str(SERVICE_ACCOUNT / "ca.crt"),
        help="CA of the API server (default: the pod's)")  # fmt: skip
    return parser.parse_args(argv)


def in_cluster_server() -> str:
    host, port = (
        os.environ.get("KUBERNETES_SERVICE_HOST"),
        os.environ.get("KUBERNETES_SERVICE_PORT"),
    )
    if not host or not port:
        sys.exit("renew_in_cluster.py: not in a pod (no KUBERNETES_SERVICE_HOST); pass --server")
    host = f"[{host}]" if ":" in host else host  # an IPv6 address
    return f"https://{host}:{port}"


def read_token(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        sys.exit(f"renew_in_cluster.py: cannot read the token at {path}: {exc}")


def encode(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unpack(secret: Mapping[str, Any] | None, out: Path, names: Sequence[str]) -> None:
    """The Secret's files into `out` (made 0700; keys 0600), as generate.py keeps them."""
    out.mkdir(mode=0o700, parents=True, exist_ok=True)
    data = (secret or {}).get("data") or {}
    for name in names:
        if data.get(name):
            mode = 0o600 if name.endswith(".key") else 0o644
            generate.write_atomic(out / name, base64.b64decode(data[name]), mode=mode)


def pack(out: Path, names: Sequence[str]) -> dict[str, str]:
    return {name: encode((out / name).read_bytes()) for name in names if (out / name).exists()}


def drop_expired_previous(out: Path) -> None:
    """A previous CA that has expired is trusted by nobody any more: forget it."""
    path = out / generate.CA_PREVIOUS
    if not path.exists():
        return
    now = datetime.datetime.now(datetime.UTC)
    kept = [
        c for c in x509.load_pem_x509_certificates(path.read_bytes()) if c.not_valid_after_utc > now
    ]
    if kept:
        generate.write_atomic(path, b"".join(generate.cert_pem(c) for c in kept), mode=0o644)
    else:
        path.unlink()
        say("previous CA expired: dropped")


def write_secret(
    api: Api,
    secrets: str,
    name: str,
    current: Mapping[str, Any] | None,
    data: Mapping[str, str],
    *,
    secret_type: str,
) -> None:
    """Create the Secret, or replace its data when it differs (guarded by its resourceVersion:
    a Secret changed since we read it is refused with 409, and the Job's retry reads again)."""
    if current is None:
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "policy-webhook"}},
            "type": secret_type,
            "data": dict(data),
        }
        api.call("POST", secrets, body)
        say(f"Secret {name} created")
        return
    if (current.get("data") or {}) == data:
        say(f"Secret {name} unchanged")
        return
    api.call("PUT", f"{secrets}/{name}", {**current, "data": dict(data)})
    say(f"Secret {name} updated")


def patch_ca_bundle(api: Api, kind: str, name: str, bundle: str) -> None:
    """caBundle of every webhook of one configuration; webhooks merge by name, so the patch
    changes that one field of the webhooks it names and nothing else."""
    path = f"/apis/admissionregistration.k8s.io/v1/{kind}/{name}"
    configuration = api.get(path)
    if configuration is None:
        raise ApiError(404, f"{kind}/{name} not found: apply the manifests first")
    stale = [
        hook["name"]
        for hook in configuration.get("webhooks") or ()
        if (hook.get("clientConfig") or {}).get("caBundle") != bundle
    ]
    if not stale:
        say(f"caBundle of {kind}/{name} unchanged")
        return
    patch = {
        "metadata": {"resourceVersion": configuration["metadata"]["resourceVersion"]},
        "webhooks": [{"name": hook, "clientConfig": {"caBundle": bundle}} for hook in stale],
    }
    api.call("PATCH", path, patch, content_type=STRATEGIC_MERGE_PATCH)
    say(f"caBundle set on {len(stale)} webhook(s) of {kind}/{name}")


def say(message: str) -> None:
    print(f"renew_in_cluster.py: {message}", file=sys.stderr)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ApiError, OSError) as exc:
        sys.exit(f"renew_in_cluster.py: {exc}")
