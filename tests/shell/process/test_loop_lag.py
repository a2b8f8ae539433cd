"""The event loop's lag: how late the loop runs a timer, the wait a review meets first."""

from __future__ import annotations

import asyncio
import statistics
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.shell.https.test_plaintext_dev import serve
from webhook.shell.process import loop_lag


def observed(blocking: float, *, interval: float = 0.005, for_seconds: float = 0.2) -> list[float]:
    """Run the probe for a while; block the loop once for `blocking` seconds meanwhile."""
    lags: list[float] = []

    async def main() -> None:
        task = asyncio.create_task(loop_lag.probe(lags.append, interval=interval))
        await asyncio.sleep(for_seconds / 2)
        time.sleep(blocking)  # synchronous: a step of background work that holds the loop
        await asyncio.sleep(for_seconds / 2)
        task.cancel()

    asyncio.run(main())
    return lags


def test_a_step_that_holds_the_loop_shows_as_that_much_lag() -> None:
    lags = observed(blocking=0.06)
    assert max(lags) >= 0.05, lags
    assert min(lags) >= 0.0, "early timers count as no wait, never as negative"


def test_an_idle_loop_shows_little_lag() -> None:
    lags = observed(blocking=0.0)
    assert len(lags) >= 10
    assert statistics.median(lags) < 0.005, lags  # the median only: the machine is shared


def test_serve_reports_the_lag_on_its_metrics(tmp_path: Path) -> None:
    process, port, _ = serve(tmp_path, "--insecure-dev-plaintext")
    try:
        time.sleep(0.3)  # a dozen probes
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
    finally:
        process.terminate()
        process.wait(20)
    counts = [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "policy_webhook_event_loop_lag_seconds_count"
    ]
    assert counts and counts[0] >= 5, counts
