"""The cluster `explain` and `report` talk to, chosen as kubectl chooses it (SPEC §7 rev. 2:
kubectl's connection flags), without a server: which files, which context, which namespace,
when the pod's service account, and what `--request-timeout` accepts."""

from __future__ import annotations

import argparse
import os
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.shell.cli import connection
from webhook.shell.cli.main import duration
from webhook.shell.cluster import kubeconfig
from webhook.shell.process.errors import UsageError


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def write_kubeconfig(path: Path, **fields: Any) -> Path:
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", **fields}))
    return path


def cluster(name: str, server: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "cluster": {"server": server, **extra}}


def context(name: str, cluster_name: str, namespace: str | None = None) -> dict[str, Any]:
    found = {"cluster": cluster_name, **({"namespace": namespace} if namespace else {})}
    return {"name": name, "context": found}


@pytest.fixture
def two_files(tmp_path: Path) -> tuple[Path, Path]:
    """Two kubeconfig files: the first names the current context, the second its cluster."""
    first = write_kubeconfig(
        tmp_path / "first",
        **{"current-context": "one"},
        contexts=[context("one", "c1", "apps")],
    )
    second = write_kubeconfig(
        tmp_path / "second",
        **{"current-context": "two"},
        contexts=[context("one", "c2", "ignored"), context("two", "c2")],
        clusters=[cluster("c1", "https://one.example:6443"), cluster("c2", "https://two.example")],
    )
    return first, second


def test_kubeconfig_files_merge_the_first_to_set_a_key_winning(
    monkeypatch: pytest.MonkeyPatch, two_files: tuple[Path, Path]
) -> None:
    first, second = two_files
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(first), str(second)]))
    target = kubeconfig.locate(None, None)
    assert (target.context, target.server, target.namespace) == (
        "one",
        "https://one.example:6443",
        "apps",  # the context's namespace: explain's and report's default -n
    )
    assert target.paths == (str(first), str(second))
    other = kubeconfig.locate(None, "two")
    assert (other.server, other.namespace) == ("https://two.example", None)


def test_the_kubeconfig_flag_beats_the_environment(
    monkeypatch: pytest.MonkeyPatch, two_files: tuple[Path, Path]
) -> None:
    first, second = two_files
    monkeypatch.setenv("KUBECONFIG", str(first))
    target = kubeconfig.locate(str(second), None)
    assert (target.context, target.paths) == ("two", (str(second),))


def test_a_missing_file_in_kubeconfig_is_passed_over(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, two_files: tuple[Path, Path]
) -> None:
    _, second = two_files
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(tmp_path / "nope"), str(second)]))
    assert kubeconfig.locate(None, None).paths == (str(second),)


def test_in_a_pod_without_a_kubeconfig_the_service_account_is_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    namespace_file = tmp_path / "namespace"
    namespace_file.write_text("policy-webhook\n")
    monkeypatch.setattr(kubeconfig, "SERVICE_ACCOUNT_NAMESPACE", str(namespace_file))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    target = kubeconfig.locate(None, None)
    assert target.in_cluster and not target.proxied
    assert (target.server, target.namespace) == ("https://[fd00::1]:6443", "policy-webhook")
    # `--context` names a kubeconfig context: there is none to read here.
    with pytest.raises(kubeconfig.ClusterUnavailable, match=r"no kubeconfig at ~/\.kube/config"):
        kubeconfig.locate(None, "elsewhere")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def flags(config: Path, timeout: float = 5.0) -> argparse.Namespace:
    return argparse.Namespace(kubeconfig=str(config), context=None, request_timeout=timeout)


def test_reach_probes_the_server_and_says_in_one_usage_error_that_it_is_down(
    tmp_path: Path,
) -> None:
    server = f"https://127.0.0.1:{closed_port()}"
    config = write_kubeconfig(
        tmp_path / "config",
        **{"current-context": "here"},
        contexts=[context("here", "c")],
        clusters=[cluster("c", server)],
    )
    with pytest.raises(UsageError, match=f"cannot reach the API server at {server}"):
        connection.reach(flags(config))


def test_through_a_proxy_the_server_is_not_ours_to_dial(tmp_path: Path) -> None:
    server = f"https://127.0.0.1:{closed_port()}"
    config = write_kubeconfig(
        tmp_path / "config",
        **{"current-context": "here"},
        contexts=[context("here", "c")],
        clusters=[cluster("c", server, **{"proxy-url": "http://127.0.0.1:3128"})],
    )
    target = connection.reach(flags(config))  # no probe, so no error
    assert target.proxied and target.server == server


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0.0), ("30", 30.0), ("30s", 30.0), ("1m30s", 90.0), ("500ms", 0.5), ("1h", 3600.0),
     ("1.5s", 1.5)],
)  # fmt: skip
def test_request_timeout_reads_kubectls_durations(text: str, seconds: float) -> None:
    assert duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "30x", "1m30", "-1s", "s"])
def test_request_timeout_refuses_what_is_not_a_duration(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="is not a duration"):
        duration(text)
