"""Talking to the benchmark's API server directly, for what kubectl does badly: watching.

A fan-out over 3,000 routes is timed by a watch on the routes' Namespace, opened before the
policy edit: the time each route's annotation first says the new marker is stamped as its
event arrives. Polling with `kubectl get -o json` would list every route again and again, and
the API server's CPU during the fan-out is one of the figures measured. Standard library
only: the client certificate and CA come from the cluster's admin kubeconfig.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml


class Api:
    """GETs and watches against the API server of one kubeconfig (its first user)."""

    def __init__(self, kubeconfig: Path) -> None:
        config = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        where = urlsplit(cluster["server"])
        self.host, self.port = where.hostname or "127.0.0.1", where.port or 443
        self._dir = Path(tempfile.mkdtemp(prefix="bench-e2e-api-"))
        files = {}
        for name, field in (("ca", "certificate-authority-data"), ("crt", "client-certificate-data"),
                            ("key", "client-key-data")):  # fmt: skip
            data = cluster[field] if name == "ca" else user[field]
            files[name] = self._dir / name
            files[name].write_bytes(base64.b64decode(data))
        self.context = ssl.create_default_context(cafile=str(files["ca"]))
        self.context.load_cert_chain(str(files["crt"]), str(files["key"]))

    def _connection(self, timeout: float) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            self.host, self.port, context=self.context, timeout=timeout
        )

    def get(self, path: str, timeout: float = 60.0) -> Any:
        connection = self._connection(timeout)
        try:
            connection.request("GET", path, headers={"Accept": "application/json"})
            response = connection.getresponse()
            body = response.read()
            if response.status != 200:
                raise RuntimeError(f"GET {path}: {response.status} {body[:300]!r}")
            return json.loads(body)
        finally:
            connection.close()


class Watch:
    """A watch of one collection from a resourceVersion, in a thread; `seen(name)` is when
    `matches(object)` first held for the object of that name (time.monotonic())."""

    def __init__(
        self, api: Api, path: str, since: str, matches: Callable[[dict[str, Any]], bool]
    ) -> None:
        self.api, self.path, self.since, self.matches = api, path, since, matches
        self.first: dict[str, float] = {}
        self.events = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench watch", daemon=True)
        self._connection: http.client.HTTPSConnection | None = None

    def start(self) -> Watch:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self._connection = self.api._connection(timeout=3600)
            query = f"?watch=1&resourceVersion={self.since}&timeoutSeconds=3600"
            self._connection.request("GET", self.path + query)
            response = self._connection.getresponse()
            if response.status != 200:
                raise RuntimeError(f"watch {self.path}: {response.status}")
            while not self._stop.is_set():
                line = response.readline()
                if not line:
                    return
                stamp = time.monotonic()
                event = json.loads(line)
                self.events += 1
                obj = event.get("object") or {}
                name = obj.get("metadata", {}).get("name")
                if name and name not in self.first and self.matches(obj):
                    self.first[name] = stamp
        except BaseException as exc:  # reported by wait(); a closed socket at stop is fine
            if not self._stop.is_set():
                self.error = exc

    def wait(self, count: int, timeout: float) -> bool:
        """True once `count` objects matched; False after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while len(self.first) < count and time.monotonic() < deadline:
            if self.error is not None:
                raise RuntimeError(f"watch failed: {self.error!r}")
            time.sleep(0.05)
        return len(self.first) >= count

    def stop(self) -> None:
        self._stop.set()
        if self._connection is not None and self._connection.sock is not None:
            with contextlib.suppress(OSError):
                self._connection.sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(5)
