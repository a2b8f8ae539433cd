"""`python -m bench` stopped with SIGTERM stops what it started: a run's servers are its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench import snapshot


def _servers(pid: int) -> set[int]:
    """The benchmark servers (`bench.servers`) that a process runs as its children, found in
    /proc by their parent (any Linux; `/proc/PID/task/PID/children` needs a kernel option);
    not the short-lived others, such as the git that names the code measured."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(") ", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue  # ended meanwhile
        if parent == pid and b"bench.servers" in command:
            found.add(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


def test_a_run_stopped_with_sigterm_stops_the_servers_it_started(tmp_path: Path) -> None:
    # As Python: the signal is what is tested, not the two minutes of compiling the core first.
    quick = ["http", "--quick", "--python", "--no-snapshot", "--no-docs", "--out", str(tmp_path)]
    run = subprocess.Popen(
        [sys.executable, "-m", "bench", *quick],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=snapshot.code_root(),
        env=snapshot.env(),
    )
    assert run.stdout is not None
    servers: set[int] = set()
    try:
        # Serving, and past everything they print as they start: the run's sanity check is done.
        for line in run.stdout:
            if "sanity:" in line:
                break
        servers = _servers(run.pid)
        assert len(servers) >= 2, "the run's no-op and webhook servers are not running"
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=60) != 0
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in servers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in servers)
    finally:
        for pid in [*servers, run.pid]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        run.stdout.close()
