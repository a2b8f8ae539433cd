"""Plain HTTP only with the explicit development flag, and never silently.

Runs the real console entry point as a process: with `--insecure-dev-plaintext` it answers
reviews over plain HTTP and logs a warning saying so; without it, plain HTTP gets nowhere.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.fixtures.paths import REPO


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[bytes], int, Path]:
    port, log = free_port(), tmp_path / "serve.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "webhook.shell.cli.main", "serve", "--manifests", "examples/cluster",
             "--host", "127.0.0.1", "--port", str(port), "--log-format", "json",
             "--self-signed-dir", str(tmp_path / "tls"), *extra],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    deadline = time.monotonic() + 30
    while b'"listening"' not in log.read_bytes():
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    return process, port, log


def post_plain(port: int, body: bytes) -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/validate", data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_plaintext_needs_the_flag_and_warns(tmp_path: Path) -> None:
    review = (REPO / "examples" / "reviews" / "create-broken-policy.json").read_bytes()
    process, port, log = serve(tmp_path, "--insecure-dev-plaintext")
    try:
        status, body = post_plain(port, review)
        assert status == 200
        assert json.loads(body)["response"]["allowed"] is False
        records = [
            json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")
        ]
        assert any(r["level"] == "WARNING" and "PLAIN HTTP" in r["msg"] for r in records)
    finally:
        process.terminate()
        process.wait(20)


def test_without_the_flag_plain_http_gets_no_answer(tmp_path: Path) -> None:
    review = (REPO / "examples" / "reviews" / "create-broken-policy.json").read_bytes()
    process, port, _ = serve(tmp_path)
    try:
        try:
            status, _ = post_plain(port, review)
        except (urllib.error.URLError, ConnectionError):
            status = 0
        assert status in (0, 400), "a TLS listener must not answer a plain HTTP review"
    finally:
        process.terminate()
        process.wait(20)
