"""The benchmark's servers: the webhook runs its collector as `policy-webhook serve` does, and
the floor carries the burden it is told to.

`serve` makes full collections rarer (`heap.tune`) and settles its heap once its state is
loaded (`heap.settle`: what is alive is frozen, never walked again). A benchmark server with
CPython's defaults would charge ours for pauses the product does not make.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trustme

from bench import servers, snapshot
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


# --- the floor's burden (bench/e2e-findings.md: a floor with costs of ours' size) --------------


def _floor(tmp_path: Path, *burden: str) -> subprocess.Popen[str]:
    (tmp_path / "annotation.txt").write_text("example.com/a\nvalue", encoding="utf-8")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    command = [sys.executable, "-m", "bench.servers", "noop", "--cert-dir", str(tmp_path)]
    return subprocess.Popen(
        [*command, "--annotate", str(tmp_path / "annotation.txt"), *burden],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=snapshot.code_root(),
        env=snapshot.env(),
    )


def _mutate(tmp_path: Path, port: int) -> tuple[float, dict[str, Any]]:
    """Seconds one /mutate of a route took, and the review that answered it."""
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u1", "object": {"metadata": {"name": "r"}}},
    }
    context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        connection.connect()
        started = time.perf_counter()
        connection.request(
            "POST", "/mutate", json.dumps(review), {"Content-Type": "application/json"}
        )
        answer = json.loads(connection.getresponse().read())
        return time.perf_counter() - started, answer
    finally:
        connection.close()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("option", ["--mutate-cpu-ms", "--mutate-wait-ms"])
def test_a_burdened_floor_answers_mutate_after_its_burden_burning_cpu_only_when_told(
    tmp_path: Path, option: str
) -> None:
    with _floor(tmp_path, option, "300") as floor:
        try:
            assert floor.stdout is not None
            line = floor.stdout.readline()
            assert line.startswith("READY "), f"the floor did not start: {line!r}"
            before = _cpu_seconds(floor.pid)
            seconds, answer = _mutate(tmp_path, int(line.split()[1]))
            spent = _cpu_seconds(floor.pid) - before
        finally:
            floor.send_signal(signal.SIGTERM)
            floor.wait(timeout=30)
    assert answer["response"]["patchType"] == "JSONPatch"  # still the floor's answer
    assert seconds >= 0.3
    if option == "--mutate-cpu-ms":
        # 300 ms of its CPU clock burnt; /proc counts in sampled clock ticks of 10 ms
        assert spent >= 0.25
    else:
        assert spent < 0.15  # waited, not spun


def test_the_floor_burns_its_event_burden_for_added_and_modified_routes_only(
    tmp_path: Path,
) -> None:
    (tmp_path / "annotation.txt").write_text("example.com/a\nvalue", encoding="utf-8")
    floor = servers._Floor(tmp_path / "annotation.txt", servers.Burden(event_cpu=0.05))
    spent = {}
    for kind in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
        started = time.process_time()
        floor.heard(kind, "r")
        spent[kind] = time.process_time() - started
    assert spent["ADDED"] >= 0.05 and spent["MODIFIED"] >= 0.05
    assert spent["DELETED"] < 0.02 and spent["BOOKMARK"] < 0.02
    assert floor.names == set()  # added, then deleted; a bookmark names nothing
