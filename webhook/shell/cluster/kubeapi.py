"""Raw requests to the Kubernetes API server: the client, one request, its error, a resource.

The informers, the reconciler and leader election all send plain JSON through the same
`ApiClient` (auth, TLS, token refresh) and read `Status` errors the same way; this is that
shared layer, apart from the list+watch machinery so that a module which only sends a request
does not depend on it. No typed models (`kubernetes_asyncio`'s are slow and lossy for custom
resources), no retries: each caller decides what a failure means for it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes_asyncio import client, config

from webhook.core.model.refs import CORE_GROUP, GroupKind

JSON = "application/json"
CLOSE_GRACE_SECONDS = 0.25


async def connect(kubeconfig: str | None = None, *, context: str | None = None) -> client.ApiClient:
    """An `ApiClient` for `kubeconfig` if given; else in-cluster; else `KUBECONFIG` or ~/.kube/config.

    An explicit path wins over the pod's service account, as with kubectl. The caller owns the
    client and closes it (`await kubeapi.close(api)`).

    The environment is read here, once: a proxy named by `HTTPS_PROXY` (unless `NO_PROXY`
    exempts the server) is used when the kubeconfig names none (`proxy-url` wins, as with
    kubectl). The library's HTTP session would otherwise look up the proxy variables and
    `~/.netrc` again for every request, each time in a worker thread.
    """
    configuration = client.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        # Re-reads the projected service-account token when it expires (bound tokens rotate).
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        await config.load_kube_config(
            config_file=path,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    if not configuration.proxy:
        proxy = environment_proxy(configuration.host or "")
        if proxy is not None:
            configuration.proxy, configuration.proxy_headers = proxy
    api = client.ApiClient(configuration)
    _without_environment_lookups(api)
    return api


async def close(api: client.ApiClient) -> None:
    """Close the client, then let its TLS connections finish closing.

    aiohttp shuts a TLS connection down in the background (the TLS close needs a few turns of
    the event loop); a loop that ends right after `api.close()` leaves those sockets to the
    garbage collector, unclosed. aiohttp's documentation advises this short wait.
    """
    await api.close()
    await asyncio.sleep(CLOSE_GRACE_SECONDS)


def environment_proxy(server: str) -> tuple[str, dict[str, str] | None] | None:
    """The proxy the environment names for `server` (a URL), and the header of its credentials.

    Credentials in the proxy's URL go in a `Proxy-Authorization` header, as aiohttp itself
    does with a proxy found in the environment.
    """
    url = urllib.parse.urlsplit(server)
    if not url.hostname or urllib.request.proxy_bypass(url.hostname):
        return None
    proxy = urllib.request.getproxies().get(url.scheme or "https")
    if not proxy:
        return None
    parsed = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    if parsed.username is None:
        return parsed.geturl(), None
    user = urllib.parse.unquote(parsed.username)
    password = urllib.parse.unquote(parsed.password or "")
    bare = parsed._replace(netloc=parsed.netloc.rpartition("@")[2]).geturl()
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return bare, {"Proxy-Authorization": f"Basic {token}"}


def _without_environment_lookups(api: client.ApiClient) -> None:
    """Turn off the client's per-request reading of `~/.netrc` and the proxy variables.

    The library builds its session with `trust_env=True` and offers no switch. A second session
    on the same connector leaked its sockets at close in the end-to-end suite, so the flag of
    the one session is set instead (aiohttp keeps it in `_trust_env` and reads it per request).
    """
    session: aiohttp.ClientSession = api.rest_client.pool_manager
    session._trust_env = False


class ApiError(Exception):
    """The API server answered with an error status; `status` is its HTTP code (410 = Gone)."""

    def __init__(self, status: int, reason: str = "", message: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}".strip(": "))
        self.status, self.reason, self.message = status, reason, message

    @classmethod
    def from_status(cls, status: int, body: object) -> ApiError:
        """From a `Status` object (a response body or a watch ERROR event)."""
        if isinstance(body, Mapping):
            code = body.get("code")
            return cls(
                code if isinstance(code, int) else status,
                str(body.get("reason") or ""),
                str(body.get("message") or ""),
            )
        return cls(status, "", str(body)[:200])


def request_timeout(seconds: float) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=seconds, connect=seconds)


async def open_request(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    query: Sequence[tuple[str, str]] = (),
    body: object = None,
    content_type: str = JSON,
    timeout: aiohttp.ClientTimeout,
) -> aiohttp.ClientResponse:
    """Send one request; the open response on 2xx (caller closes it), `ApiError` otherwise."""
    response: aiohttp.ClientResponse = await api.call_api(
        path,
        method,
        query_params=list(query),
        header_params={"Accept": JSON, "Content-Type": content_type},
        body=body,
        auth_settings=["BearerToken"],
        _preload_content=False,  # the raw aiohttp response: JSON as sent, no typed models
        _request_timeout=timeout,
    )
    if response.status < 300:
        return response
    try:
        raw = await response.read()
    finally:
        response.release()
    try:
        status: object = json.loads(raw)
    except ValueError:
        status = raw.decode(errors="replace")
    raise ApiError.from_status(response.status, status)


async def request_json(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    query: Sequence[tuple[str, str]] = (),
    body: object = None,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """One request, whole JSON answer ({} when it is not an object)."""
    response = await open_request(
        api, method, path, query=query, body=body, timeout=request_timeout(timeout)
    )
    try:
        data = json.loads(await response.read())
    finally:
        response.release()
    return data if isinstance(data, dict) else {}


# --- resources -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Resource:
    """One listable resource at one version: where to list and watch it, what kind it holds."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def group_kind(self) -> GroupKind:
        return GroupKind(self.group, self.kind)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def path(self) -> str:
        """The cluster-wide collection (all namespaces for namespaced kinds)."""
        if self.group == CORE_GROUP:
            return f"/api/{self.version}/{self.plural}"
        return f"/apis/{self.group}/{self.version}/{self.plural}"


_KUBE_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(name: str) -> tuple[int, int, int]:
    """Kubernetes version order: GA > beta > alpha, then by numbers; others last."""
    match = _KUBE_VERSION.match(name)
    if match is None:
        return (0, 0, 0)
    major, stage, minor = match.groups()
    return ({"alpha": 1, "beta": 2}.get(stage or "", 3), int(major), int(minor or 0))


def resource_of_crd(crd: Mapping[str, Any]) -> Resource | None:
    """The resource a CRD serves, at its preferred version (as API discovery would name it)."""
    spec = crd.get("spec")
    if not isinstance(spec, Mapping):
        return None
    group, names, versions = spec.get("group"), spec.get("names"), spec.get("versions")
    if (
        not isinstance(group, str)
        or not isinstance(names, Mapping)
        or not isinstance(versions, list)
    ):
        return None
    kind, plural = names.get("kind"), names.get("plural")
    served = [
        v["name"]
        for v in versions
        if isinstance(v, Mapping) and v.get("served") and isinstance(v.get("name"), str)
    ]
    if not isinstance(kind, str) or not isinstance(plural, str) or not served:
        return None
    return Resource(group, max(served, key=version_priority), plural, kind)
