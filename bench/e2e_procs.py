"""The processes of the end-to-end benchmark besides the control plane: ours, the no-op, py-spy.

Ours is `policy-webhook serve` in cluster mode, started from the run's frozen copy of the code
(`bench.snapshot`), so that a tree edited mid-run is not what gets measured. The no-op is
`bench.servers noop`: the same aiohttp HTTPS stack answering `allowed: true` to everything,
behind an ECDSA P-256 certificate as ours. CPU time is read from `/proc/<pid>/stat` (user +
system, every thread, 10 ms ticks): it needs nothing from the process measured. Every process
started here is stopped by its own PID.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import trustme

from bench import e2e_world, promtext, snapshot

# The suite's `WebhookProcess` (start, readiness, stop by PID), from its folder.
webhook_harness: Any = importlib.import_module("webhook_harness")

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far, all its threads (dead ones included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14, 15)


def thread_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process's live threads, to the nanosecond: the scheduler's own account
    (`/proc/<pid>/task/*/schedstat`), for spans of a few milliseconds, which `cpu_seconds`'
    10 ms ticks round to 0 or 10. A thread that ended takes its time with it: over a short
    span, read both ends while the same threads live."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # a thread just ended
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


class Ours(webhook_harness.WebhookProcess):  # type: ignore[misc]  # untyped: tests/e2e
    """`policy-webhook serve` as the suite runs it, but from the snapshot of the code."""

    code_root: Path | None = None  # another tree's `webhook/` (a baseline); else the snapshot's

    def start(self, *, timeout: float = 120.0) -> None:
        command = [
            sys.executable, "-m", "webhook.shell.cli.main", "serve",
            "--kubeconfig", str(self.cluster.kubeconfig),
            "--host", "127.0.0.1", "--port", str(self.port),
            "--self-signed-dir", str(self.dir / "tls"),
            "--leader-election-namespace", "default",
            "--log-format", "json", "--drain-seconds", "2",
            *self.args,  # e.g. `--log-decisions all`, for every decision's latency (growth)
        ]  # fmt: skip
        root = self.code_root or snapshot.code_root()
        env = {**snapshot.env(root), "POD_NAME": self.name}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=root,
                env=env,
            )
        self.wait_ready(timeout)

    @property
    def endpoint(self) -> e2e_world.Endpoint:
        return e2e_world.Endpoint(self.url, self.ca_file)

    def samples(self) -> promtext.Samples:
        status, text = self.get("/metrics")
        if status != 200:
            raise RuntimeError(f"{self.name}: /metrics answered {status}")
        return promtext.parse(text)

    def log_size(self) -> int:
        return self.log_path.stat().st_size if self.log_path.exists() else 0

    def decisions(self, since: int) -> list[dict[str, Any]]:
        """Decision log records (one per admission call) written after byte `since`."""
        import json

        with open(self.log_path, "rb") as handle:
            handle.seek(since)
            lines = handle.read().decode(errors="replace").splitlines()
        out = []
        for line in lines:
            if line.startswith("{") and '"webhook.decisions"' in line:
                with contextlib.suppress(ValueError):
                    record = json.loads(line)
                    if "latencyMs" in record:
                        out.append(record)
        return out


class Noop:
    """The no-op admission webhook in a process of its own; `stop()` ends it by PID."""

    def __init__(self, workdir: Path, args: Sequence[str] = ()) -> None:
        self.args = list(args)  # `bench.servers noop` options: the floor's `--annotate`, `--watch`
        self.dir = workdir / "noop"
        self.dir.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA(key_type=trustme.KeyType.ECDSA)
        cert = ca.issue_cert("127.0.0.1", "localhost", key_type=trustme.KeyType.ECDSA)
        cert.private_key_pem.write_to_path(str(self.dir / "tls.key"))
        cert.cert_chain_pems[0].write_to_path(str(self.dir / "tls.crt"))
        ca.cert_pem.write_to_path(str(self.dir / "ca.crt"))
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def endpoint(self) -> e2e_world.Endpoint:
        return e2e_world.Endpoint(f"https://127.0.0.1:{self.port}", self.dir / "ca.crt")

    def start(self, timeout: float = 60.0) -> None:
        log = open(self.dir / "noop.log", "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.servers",
                "noop",
                "--cert-dir",
                str(self.dir),
                *self.args,
            ],
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=snapshot.code_root(),
            env=snapshot.env(),
        )
        log.close()
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("READY "):
                self.port = int(line.split()[1])
                return
            if not line and self.proc.poll() is not None:
                break
        raise RuntimeError(f"the no-op webhook did not start (log {self.dir / 'noop.log'})")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()  # the pipe `start` read `READY` from


def py_spy() -> str | None:
    local = Path(sys.executable).parent / "py-spy"
    if local.exists():
        return str(local)
    import shutil

    return shutil.which("py-spy")


@contextlib.contextmanager
def sampled(
    pid: int | None, into: Path, *, rate: int = 200, gil: bool = False
) -> Iterator[Path | None]:
    """py-spy sampling `pid` for the block (non-blocking: the process is never paused), its
    collapsed stacks written to `into`; a no-op without py-spy or without a pid.

    Without `gil`, a thread counts as busy whenever the system says it may run — also while
    it waits for a core, which on a crowded machine puts a share in `select` and socket
    writes; with `gil`, only while it holds the GIL: the time it ran Python."""
    tool = py_spy()
    if tool is None or pid is None:
        yield None
        return
    command: Sequence[str] = [
        tool, "record", "--pid", str(pid), "--rate", str(rate), "--nonblocking",
        "--format", "raw", "--output", str(into), *(["--gil"] if gil else []),
    ]  # fmt: skip
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)
        time.sleep(0.5)  # attached before the phase starts
        try:
            yield into
        finally:
            proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
