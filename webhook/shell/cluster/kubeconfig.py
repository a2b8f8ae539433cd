"""Which cluster a command talks to, as kubectl decides it, and whether it answers at all.

kubectl's rules: `--kubeconfig`, else `$KUBECONFIG` (files joined by the path separator, the
first to set a key wins), else `~/.kube/config`; without any, inside a pod, the service
account. `--context`, else the current one; its namespace is the default `-n`.

`probe` opens a connection to the server (TCP, and the TLS handshake for https) before the
API client is even imported: that library takes a second or more to load, and a command
against a server that is down must say so within `--request-timeout`, not after loading it.
It only asks "does anything answer there": nothing is sent, no certificate is judged (the
client does that, with the kubeconfig's CA). Without a proxy only: through one, the server
is not ours to dial. Standard library and YAML only.
"""

from __future__ import annotations

import os
import socket
import ssl
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
_PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY")


class ClusterUnavailable(Exception):
    """The cluster cannot be read; `str()` is one line saying why and what to try."""


@dataclass(frozen=True, slots=True)
class Target:
    """A kubeconfig's choice: its files, the context, the server and the default namespace.
    `in_cluster`: no kubeconfig, the pod's service account instead."""

    paths: tuple[str, ...]
    context: str
    server: str
    namespace: str | None
    proxied: bool
    in_cluster: bool = False


def locate(kubeconfig: str | None, context: str | None) -> Target:
    """The cluster `kubectl --kubeconfig … --context …` would talk to."""
    chosen = kubeconfig or os.environ.get("KUBECONFIG")
    if not chosen and not context and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return _in_cluster()
    shown = chosen or "~/.kube/config"
    candidates = (chosen or os.path.expanduser("~/.kube/config")).split(os.pathsep)
    paths = tuple(p for p in (os.path.expanduser(c) for c in candidates if c) if os.path.isfile(p))
    if not paths:
        raise ClusterUnavailable(
            f"no kubeconfig at {shown}: give --kubeconfig, set KUBECONFIG, "
            "or read files with --manifests"
        )
    merged = _merged(paths)
    name = context or merged["current-context"]
    if not name:
        raise ClusterUnavailable(
            f"{shown} sets no current context: pass --context ({_listed(merged['contexts'])})"
        )
    chosen_context = merged["contexts"].get(name)
    if chosen_context is None:
        raise ClusterUnavailable(
            f"context {name!r} is not in {shown} ({_listed(merged['contexts'])})"
        )
    cluster_name = chosen_context.get("cluster")
    cluster = merged["clusters"].get(cluster_name)
    if cluster is None or not isinstance(cluster.get("server"), str):
        raise ClusterUnavailable(f"context {name!r} of {shown} names no cluster with a server")
    namespace = chosen_context.get("namespace")
    return Target(
        paths,
        name,
        cluster["server"],
        namespace if isinstance(namespace, str) and namespace else None,
        proxied=bool(cluster.get("proxy-url")) or any(os.environ.get(v) for v in _PROXY_VARIABLES),
    )


def _merged(paths: tuple[str, ...]) -> dict[str, Any]:
    """kubectl's merge: for contexts and clusters by name, and for current-context, the first
    file that sets one wins. Users are left to the API client, which reads them when it
    connects (`cluster.snapshot`)."""
    merged: dict[str, Any] = {"current-context": None, "contexts": {}, "clusters": {}}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as handle:
                data = yaml.safe_load(handle) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ClusterUnavailable(f"cannot read kubeconfig {path}: {_one_line(exc)}") from None
        if not isinstance(data, Mapping):
            raise ClusterUnavailable(f"kubeconfig {path} is not a mapping")
        if not merged["current-context"] and isinstance(data.get("current-context"), str):
            merged["current-context"] = data["current-context"]
        for section, inner in (("contexts", "context"), ("clusters", "cluster")):
            for entry in data.get(section) or ():
                if isinstance(entry, Mapping) and isinstance(entry.get(inner), Mapping):
                    merged[section].setdefault(entry.get("name"), entry[inner])
    return merged


def _in_cluster() -> Target:
    host, port = (
        os.environ["KUBERNETES_SERVICE_HOST"],
        os.environ.get("KUBERNETES_SERVICE_PORT", "443"),
    )
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as handle:
            namespace: str | None = handle.read().strip() or None
    except OSError:
        namespace = None
    server = f"https://{_host_for_url(host)}:{port}"
    return Target((), "", server, namespace, proxied=False, in_cluster=True)


def _host_for_url(host: str) -> str:
    return f"[{host}]" if ":" in host else host  # an IPv6 address


def _listed(contexts: Mapping[Any, Any]) -> str:
    names = sorted(str(n) for n in contexts if n)
    return f"it has: {', '.join(names)}" if names else "it has no contexts"


def probe(server: str, timeout: float) -> None:
    """Raise `ClusterUnavailable` unless something at `server` accepts a connection (and, for
    https, completes a TLS handshake) within `timeout` seconds (0: no limit)."""
    url = urllib.parse.urlsplit(server)
    https = url.scheme != "http"
    host, port = url.hostname, url.port or (443 if https else 80)
    if not host:
        raise ClusterUnavailable(f"the kubeconfig's server {server!r} is not a URL")
    limit = timeout or None
    try:
        with socket.create_connection((host, port), timeout=limit) as raw:
            if https:
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE  # a liveness probe: the client verifies
                with context.wrap_socket(raw, server_hostname=host):
                    pass
    except TimeoutError:
        raise ClusterUnavailable(
            f"the API server at {server} did not answer within {timeout:g}s (--request-timeout)"
        ) from None
    except socket.gaierror as exc:
        raise ClusterUnavailable(
            f"cannot resolve the API server's host {host}: {exc.strerror}"
        ) from None
    except ssl.SSLError as exc:
        raise ClusterUnavailable(
            f"no TLS from the API server at {server}: {_one_line(exc)}"
        ) from None
    except OSError as exc:
        raise ClusterUnavailable(
            f"cannot reach the API server at {server}: {exc.strerror or _one_line(exc)}"
        ) from None


def _one_line(exc: object) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__
