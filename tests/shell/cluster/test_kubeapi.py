"""The API client as `kubeapi.connect` builds it: no environment lookups per request."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from webhook.shell.cluster import kubeapi

PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")


@pytest.fixture(autouse=True)
def no_proxy_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def kubeconfig(path: Path, server: str, **cluster: Any) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "u", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return str(path)


def test_the_client_reads_no_netrc_or_proxy_variables_per_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    (tmp_path / "netrc").write_text("machine 127.0.0.1 login x password y\n", encoding="utf-8")
    seen: list[str | None] = []

    async def version(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.json_response({"major": "1", "minor": "20"})

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/version", version)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        api = await kubeapi.connect(kubeconfig(tmp_path / "config", f"http://127.0.0.1:{port}"))
        try:
            assert api.rest_client.pool_manager.trust_env is False
            for _ in range(3):
                assert (await kubeapi.request_json(api, "GET", "/version"))["minor"] == "20"
        finally:
            await api.close()
            await runner.cleanup()

    asyncio.run(main())
    assert seen == ["Bearer t0ken"] * 3, "the token, never netrc's credentials"


def test_a_proxy_of_the_kubeconfig_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://from-env:3128")
    config = kubeconfig(
        tmp_path / "config",
        "https://api.example:6443",
        **{"proxy-url": "http://from-kubeconfig:8080"},
    )

    async def main() -> tuple[Any, Any]:
        api = await kubeapi.connect(config)
        try:
            return api.rest_client.proxy, api.rest_client.pool_manager.trust_env
        finally:
            await api.close()

    assert asyncio.run(main()) == ("http://from-kubeconfig:8080", False)


def test_a_proxy_of_the_environment_is_read_once_at_connect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://from-env:3128")
    config = kubeconfig(tmp_path / "config", "https://api.example:6443")

    async def main() -> Any:
        api = await kubeapi.connect(config)
        try:
            return api.rest_client.proxy
        finally:
            await api.close()

    assert asyncio.run(main()) == "http://from-env:3128"


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({}, None),
        ({"HTTPS_PROXY": "http://p:3128"}, ("http://p:3128", None)),
        ({"https_proxy": "p:3128"}, ("http://p:3128", None)),
        ({"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "api.example"}, None),
        ({"HTTPS_PROXY": "http://p:3128", "NO_PROXY": ".example"}, None),
        ({"HTTP_PROXY": "http://p:3128"}, None),  # the server speaks HTTPS
        (
            {"HTTPS_PROXY": "http://me:s%40cret@p:3128"},
            ("http://p:3128", {"Proxy-Authorization": "Basic bWU6c0BjcmV0"}),
        ),
    ],
)
def test_the_environment_proxy_follows_the_usual_variables(
    variables: dict[str, str], expected: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert kubeapi.environment_proxy("https://api.example:6443") == expected
