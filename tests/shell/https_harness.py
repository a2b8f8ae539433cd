"""Test harness for the IO shell: cluster state from YAML, AdmissionReviews as the API server
sends them, and the webhook served over real HTTPS on 127.0.0.1 from a background thread (its
own event loop), so tests talk to it with a blocking `http.client` as a remote client would."""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
import socket
import ssl
import textwrap
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trustme
import yaml

from webhook.shell.https import server
from webhook.shell.https.tls import ReloadingTLS
from webhook.shell.process.readiness import Readiness

CLUSTER_YAML = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: retrypolicies.policies.example.com
  labels:
    gateway.networking.k8s.io/policy: inherited
spec:
  group: policies.example.com
  scope: Namespaced
  names: {kind: RetryPolicy, plural: retrypolicies, singular: retrypolicy}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              targetRefs: {type: array, items: {type: object}}
              default: &retry
                type: object
                properties:
                  maxRetries: {type: integer}
                  retryOn: {type: array, items: {type: string}}
              override: *retry
---
apiVersion: v1
kind: Namespace
metadata: {name: infra}
---
apiVersion: v1
kind: Namespace
metadata: {name: apps}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: infra}
spec:
  gatewayClassName: acme
  listeners:
  - name: http
    protocol: HTTP
    port: 80
    allowedRoutes: {namespaces: {from: All}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: apps}
spec:
  parentRefs:
  - {name: gw, namespace: infra}
  rules:
  - name: main
    backendRefs:
    - {name: svc, port: 8080}
"""


def load_yaml(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(textwrap.dedent(text)) if doc]


def review_of(
    obj: dict[str, Any] | None,
    *,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    uid: str | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """The AdmissionReview v1 the API server would send for this object."""
    source = obj or old or {}
    api_version = source.get("apiVersion", "v1")
    group, _, version = api_version.rpartition("/")
    metadata = source.get("metadata", {})
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": source.get("kind", "")},
        "resource": {
            "group": group,
            "version": version,
            "resource": source.get("kind", "").lower() + "s",
        },
        "name": metadata.get("name", ""),
        "operation": operation,
        "userInfo": {"username": "alice"},
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
    }
    if "namespace" in metadata:
        request["namespace"] = metadata["namespace"]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def policy(text: str) -> dict[str, Any]:
    (doc,) = load_yaml(text)
    return doc


def write_pair(cert: trustme.LeafCert, folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    cert_file, key_file = folder / "tls.crt", folder / "tls.key"
    cert.cert_chain_pems[0].write_to_path(cert_file)
    cert.private_key_pem.write_to_path(key_file)
    return cert_file, key_file


def sha256_of_leaf(cert: trustme.LeafCert) -> str:
    return hashlib.sha256(
        ssl.PEM_cert_to_DER_cert(cert.cert_chain_pems[0].bytes().decode())
    ).hexdigest()


class Reply:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode()


class RunningWebhook:
    """`server.serve` on 127.0.0.1:<free port> in a thread with its own event loop."""

    def __init__(
        self,
        app_factory: Callable[[Readiness], Any],
        tls: ReloadingTLS,
        client_context: ssl.SSLContext,
        *,
        drain_timeout: float = 5.0,
        shutdown_delay: float = 0.0,
    ) -> None:
        self.readiness = Readiness("tls", "not-draining")
        self.app = app_factory(self.readiness)
        self.tls = tls
        self.client_context = client_context
        self._drain_timeout, self._shutdown_delay = drain_timeout, shutdown_delay
        self._started = threading.Event()
        self._error: BaseException | None = None
        self.port = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="webhook-under-test", daemon=True)

    def __enter__(self) -> RunningWebhook:
        self._thread.start()
        if not self._started.wait(10):
            raise TimeoutError("webhook did not start")
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # surfaced by __enter__
            self._error = exc
            self._started.set()

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()

        def started(running: server.HttpsServer) -> None:
            self.port = running.port
            self._started.set()

        await server.serve(
            self.app,
            tls=self.tls,
            readiness=self.readiness,
            host="127.0.0.1",
            port=0,
            drain_timeout=self._drain_timeout,
            shutdown_delay=self._shutdown_delay,
            stop=self._stop,
            on_started=started,
        )

    def stop(self) -> None:
        if self.loop is not None and self._stop is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def in_loop(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on the server's loop (where the SSLContext is used) and return its result."""
        assert self.loop is not None

        async def call() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(10)

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        conn = http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=self.client_context, timeout=30
        )
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            return Reply(response.status, dict(response.getheaders()), response.read())
        finally:
            conn.close()

    def post_review(self, path: str, review: dict[str, Any]) -> Reply:
        return self.request(
            "POST", path, json.dumps(review).encode(), {"Content-Type": "application/json"}
        )

    def peer_certificate_sha256(self, context: ssl.SSLContext | None = None) -> str:
        """A fresh handshake; the SHA-256 of the certificate the server presented."""
        with (
            socket.create_connection(("127.0.0.1", self.port), timeout=10) as raw,
            (context or self.client_context).wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            der = tls.getpeercert(binary_form=True)
        assert der is not None
        return hashlib.sha256(der).hexdigest()
