"""Fixtures for the end-to-end suite: one real control plane for the whole session.

`cluster` provisions the binaries (cached; a cold build takes a few minutes), starts etcd and
kube-apiserver v1.20.2 on loopback, installs the experimental Gateway API CRDs (ListenerSet
included; upstream's, or the project's fallback when upstream's are not found, and the session
header says which) and stops every process by PID at the end, also after failures. When a test
fails, its report gains a section with the log directory and the tail of each process log. Every
test under this folder is marked `e2e` here, so `pytest -m "not e2e"` skips them all.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

# The helpers sit beside this file; make them importable whatever pytest's import mode is.
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import cluster as cluster_lib  # noqa: E402
import provision  # noqa: E402

_ACTIVE: list[cluster_lib.LocalCluster] = []
_LOG_LINES = 30


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "e2e: end-to-end test against a real kube-apiserver (slow; builds it once)"
    )


@pytest.hookimpl(tryfirst=True)  # before `-m` deselection reads the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything under tests/e2e is an e2e test, so `-m "not e2e"` skips it all."""
    for item in items:
        if _is_e2e(item):
            item.add_marker(pytest.mark.e2e)


def _is_e2e(item: pytest.Item) -> bool:
    return item.path.resolve().is_relative_to(_HERE)


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[cluster_lib.LocalCluster]:
    """A running LocalCluster with the experimental Gateway API CRDs installed."""
    binaries = _provision_visibly(request.config)
    local = cluster_lib.LocalCluster(binaries)
    _ACTIVE.append(local)
    try:
        started = time.monotonic()
        local.start()
        ready = time.monotonic() - started
        crds = local.install_gateway_api_crds(channel=cluster_lib.SUITE_CHANNEL)
        # Uncaptured: which CRDs a run used must be on the terminal and in CI's log, pass or fail.
        with _uncaptured(request.config):
            print(
                f"\n[e2e] apiserver {local.server} ready in {ready:.1f}s; "
                f"CRDs in {time.monotonic() - started - ready:.1f}s; logs {local.log_dir}"
                f"\n[e2e] Gateway API CRDs: {crds.describe()}",
                flush=True,
            )
        yield local
    finally:
        local.stop()
        _ACTIVE.remove(local)
        failed = request.session.testsfailed > 0
        if failed or os.environ.get("E2E_KEEP_CLUSTER_DIR") == "1":
            print(f"\n[e2e] kept cluster dir for inspection: {local.workdir}")
        else:
            local.cleanup()


def _provision_visibly(config: pytest.Config) -> provision.Binaries:
    """A cold build takes minutes: let its progress lines through pytest's output capture."""
    with _uncaptured(config):
        return provision.ensure_binaries()


def _uncaptured(config: pytest.Config) -> contextlib.AbstractContextManager[None]:
    """Output inside goes straight to the terminal, whatever pytest's capture mode."""
    capture = config.pluginmanager.getplugin("capturemanager")
    return capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """On failure, attach where the logs are and what the processes said last."""
    report = yield
    if report.failed and _ACTIVE and _is_e2e(item):
        for local in _ACTIVE:
            report.sections.append(("e2e cluster", _describe(local)))
    return report


def _describe(local: cluster_lib.LocalCluster) -> str:
    parts = [
        f"server {local.server}  kubeconfig {local.kubeconfig}  logs {local.log_dir}",
        f"running: {local.pids}",
    ]
    for name in ("kube-apiserver", "etcd"):
        parts.append(f"--- last {_LOG_LINES} lines of {local.log_path(name)}")
        parts.append(local.log_tail(name, _LOG_LINES))
    return "\n".join(parts)
