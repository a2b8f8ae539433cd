"""The HTTP benchmark's webhook server runs its collector as `policy-webhook serve` does.

`serve` makes full collections rarer (`heap.tune`) and settles its heap once its state is
loaded (`heap.settle`: what is alive is frozen, never walked again). A benchmark server with
CPython's defaults would charge ours for pauses the product does not make.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from bench import snapshot
from webhook.shell.https.tls import self_signed
from webhook.shell.process import heap


def _ready_fields(line: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in line.split()[2:])


def test_the_webhook_server_tunes_its_collector_and_settles_its_heap(tmp_path: Path) -> None:
    self_signed(tmp_path / "certs")
    certs = str(tmp_path / "certs")
    with subprocess.Popen(
        [sys.executable, "-m", "bench.servers", "webhook", "--cert-dir", certs, "--scale", "0.01"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=snapshot.code_root(),
        env=snapshot.env(),
    ) as server:
        assert server.stdout is not None
        try:
            line = server.stdout.readline()
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
    assert line.startswith("READY "), f"the server did not start: {line!r}"
    fields = _ready_fields(line)
    _, _, full = (int(n) for n in fields["gc_threshold"].split(","))
    assert full == heap.FULL_PASS_AFTER
    assert int(fields["frozen"]) > 0  # nothing is frozen until the heap is settled
