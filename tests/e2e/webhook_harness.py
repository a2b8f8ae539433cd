"""The webhook as the end-to-end suite runs it: a real `policy-webhook serve` process.

`WebhookProcess` starts the console entry point against the test cluster's kubeconfig, with a
self-signed certificate on a free loopback port, and stops it by PID. `register` installs the
shipped webhook configurations (manifests/base/webhooks.yaml) with `clientConfig` pointed at
that process, the way an admin's cluster points them at the Service.
"""

from __future__ import annotations

import base64
import copy
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from cluster import LocalCluster

REPO = Path(__file__).resolve().parents[2]
WEBHOOKS = REPO / "manifests" / "base" / "webhooks.yaml"
EXAMPLES = REPO / "examples"


class WebhookProcess:
    """One `policy-webhook serve` in cluster mode; logs go to `log_path`."""

    def __init__(
        self,
        cluster: LocalCluster,
        workdir: Path,
        *,
        name: str = "webhook",
        args: Sequence[str] = (),
    ) -> None:
        from cluster import free_loopback_port

        self.cluster = cluster
        self.name = name
        self.dir = workdir / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_loopback_port()
        self.args = list(args)
        self.log_path = self.dir / "webhook.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def ca_file(self) -> Path:
        return self.dir / "tls" / "ca.crt"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, *, timeout: float = 60.0) -> None:
        command = [
            sys.executable, "-m", "webhook.shell.cli.main", "serve",
            "--kubeconfig", str(self.cluster.kubeconfig),
            "--host", "127.0.0.1", "--port", str(self.port),
            "--self-signed-dir", str(self.dir / "tls"),
            "--leader-election-namespace", "default",
            "--log-format", "json", "--drain-seconds", "5",
            *self.args,
        ]  # fmt: skip
        env = {"POD_NAME": self.name, "PATH": "/usr/bin:/bin"}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env
            )
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            if self.ca_file.exists() and self.get("/readyz")[0] == 200:
                self.check_core()
                return
            time.sleep(0.2)
        raise TimeoutError(f"{self.name} not ready after {timeout}s:\n{self.log_tail()}")

    def check_core(self, wait: float = 5.0) -> None:
        """Under `make test-compiled` (POLICY_WEBHOOK_EXPECT_CORE), the process must say, in
        its `serving` line, that it runs the core it was started to test."""
        expected = os.environ.get("POLICY_WEBHOOK_EXPECT_CORE")
        deadline = time.monotonic() + wait
        while expected:
            said = [r.get("core") for r in self.log_records() if r.get("msg") == "serving"]
            if said:
                if said[-1] != expected:
                    raise RuntimeError(f"{self.name} runs the core {said[-1]!r}, not {expected!r}")
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} logged no `serving` line:\n{self.log_tail()}")
            time.sleep(0.1)

    def get(self, path: str) -> tuple[int, str]:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            with urllib.request.urlopen(self.url + path, context=context, timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except (OSError, ssl.SSLError):
            return 0, ""

    def stop(self, sig: int = signal.SIGTERM, *, timeout: float = 20.0) -> int | None:
        """Signal the process by its PID and wait; SIGKILL if it does not go in time."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def log_records(self) -> Iterator[dict[str, Any]]:
        import json

        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                yield json.loads(line)


def webhook_configurations(process: WebhookProcess, *, suffix: str = "e2e") -> list[dict[str, Any]]:
    """The shipped configurations, renamed and pointed at `process` by URL with its CA."""
    ca_bundle = base64.b64encode(process.ca_file.read_bytes()).decode()
    out = []
    for doc in yaml.safe_load_all(WEBHOOKS.read_text()):
        if not doc:
            continue
        doc = copy.deepcopy(doc)
        doc["metadata"]["name"] = f"{doc['metadata']['name']}-{suffix}"
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": process.url + path, "caBundle": ca_bundle}
        out.append(doc)
    return out


@contextmanager
def registered(
    cluster: LocalCluster,
    process: WebhookProcess,
    *,
    suffix: str = "e2e",
    adapt: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
) -> Iterator[None]:
    """Webhook configurations live for the block, and are deleted after it whatever happens.

    `adapt` changes the configurations first (a test's own rules)."""
    configs = webhook_configurations(process, suffix=suffix)
    if adapt is not None:
        configs = adapt(configs)
    cluster.apply(configs)
    time.sleep(1.5)  # the API server picks up new configurations within about a second
    try:
        yield
    finally:
        for doc in configs:
            kind = doc["kind"].lower()
            cluster.kubectl(
                "delete", kind, doc["metadata"]["name"], "--ignore-not-found", check=False
            )


def kubectl(
    cluster: LocalCluster, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The real kubectl, run from the repository root so messages show the paths admins type;
    its exit code and output are the test's to judge."""
    command = [cluster.kubectl_path, f"--kubeconfig={cluster.kubeconfig}", *args]
    return subprocess.run(
        command, input=input, capture_output=True, text=True, cwd=REPO, timeout=60, check=False
    )


def apply_example_cluster(cluster: LocalCluster) -> None:
    """The example policy CRDs (adapted for v1.20) and every object of examples/cluster."""
    from cluster import adapt_crd_for_v1_20

    files = sorted((EXAMPLES / "cluster").glob("*.yaml"))
    crds = [d for d in yaml.safe_load_all(files[0].read_text()) if d]
    cluster.apply([adapt_crd_for_v1_20(d) for d in crds])
    for crd in crds:
        cluster.kubectl(
            "wait", "--for=condition=Established", f"crd/{crd['metadata']['name']}", "--timeout=30s"
        )
    for path in files[1:]:
        cluster.kubectl("apply", "-f", str(path))
