"""The benchmark's servers: the webhook runs its collector as `policy-webhook serve` does, and
the floor carries the burden it is told to.

`serve` makes full collections rarer (`heap.tune`) and settles its heap once its state is
loaded (`heap.settle`: what is alive is frozen, never walked again). A benchmark server with
CPython's defaults would charge ours for pauses the product does not make.
"""

from __future__ import annotations

import http.client
import json
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench import e2e_procs, e2e_world, servers, snapshot
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


def _burdened_floor(tmp_path: Path, *burden: str) -> e2e_procs.Noop:
    """The floor as the end-to-end harness starts it (its certificates, `READY`), burdened."""
    (tmp_path / "annotation.txt").write_text("example.com/a\nvalue", encoding="utf-8")
    return e2e_procs.Noop(tmp_path, ["--annotate", str(tmp_path / "annotation.txt"), *burden])


def _mutate(endpoint: e2e_world.Endpoint) -> tuple[float, dict[str, Any]]:
    """Seconds one /mutate of a route took, and the review that answered it."""
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u1", "object": {"metadata": {"name": "r"}}},
    }
    context = ssl.create_default_context(cafile=str(endpoint.ca_file))
    port = int(endpoint.url.rsplit(":", 1)[1])
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


@pytest.mark.parametrize("option", ["--mutate-cpu-ms", "--mutate-wait-ms"])
def test_a_burdened_floor_answers_mutate_after_its_burden_burning_cpu_only_when_told(
    tmp_path: Path, option: str
) -> None:
    floor = _burdened_floor(tmp_path, option, "300")
    floor.start()
    try:
        assert floor.pid is not None
        before = e2e_procs.thread_cpu_seconds(floor.pid)
        seconds, answer = _mutate(floor.endpoint)
        spent = e2e_procs.thread_cpu_seconds(floor.pid) - before
    finally:
        floor.stop()
    assert answer["response"]["patchType"] == "JSONPatch"  # still the floor's answer
    assert seconds >= 0.3
    if option == "--mutate-cpu-ms":
        assert spent >= 0.3  # burnt on the processor: its threads' CPU clock
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
