"""The event loop's lag: how late the loop runs a timer, the wait a review meets first."""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.shell.https.test_plaintext_dev import serve
from webhook.shell.process import loop_lag


def observed(blocking: float, *, interval: float = 0.005, for_seconds: float = 0.2) -> list[float]:
    """Run the probe for a while, at one rate whatever the CPU does; block the loop once for
    `blocking` seconds meanwhile."""
    lags: list[float] = []

    async def main() -> None:
        probe = loop_lag.probe(lags.append, interval=interval, idle_interval=interval)
        task = asyncio.create_task(probe)
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


def wake_ups(cpu_clock: Callable[[], float], *, for_seconds: float = 0.4) -> list[float]:
    """When the probe woke (monotonic seconds) over a while, its CPU read from `cpu_clock`."""
    woke: list[float] = []

    async def main() -> None:
        probe = loop_lag.probe(
            lambda _lag: woke.append(time.monotonic()),
            interval=0.005,
            idle_interval=0.05,
            cpu_clock=cpu_clock,
        )
        task = asyncio.create_task(probe)
        await asyncio.sleep(for_seconds)
        task.cancel()

    asyncio.run(main())
    return woke


def test_an_idle_process_is_probed_at_the_idle_interval() -> None:
    woke = wake_ups(lambda: 0.0)  # no CPU spent between probes
    gaps = [later - earlier for earlier, later in itertools.pairwise(woke)]
    assert gaps and min(gaps) >= 0.045, gaps  # asyncio may run a timer a clock tick early
    assert len(woke) <= 9, woke  # the first after `interval`, then one per 50 ms at most


def test_a_working_process_is_probed_at_the_short_interval() -> None:
    # A CPU clock that runs with the wall clock: the process spent all the time working.
    woke = wake_ups(time.monotonic)
    gaps = [later - earlier for earlier, later in itertools.pairwise(woke)]
    assert len(woke) >= 20, woke  # 80 at most in 0.4 s; the machine is shared
    assert statistics.median(gaps) < 0.02, gaps


def test_the_probe_speeds_up_when_work_starts() -> None:
    started = time.monotonic()

    def cpu_clock() -> float:  # idle for 0.2 s, then working all the time
        return max(0.0, time.monotonic() - started - 0.2)

    woke = wake_ups(cpu_clock, for_seconds=0.5)
    before = [t for t in woke if t - started < 0.2]
    after = [t for t in woke if t - started > 0.3]
    assert len(before) <= 5, before  # one per 50 ms
    assert len(after) >= 2 * len(before), (before, after)


def test_serve_reports_the_lag_on_its_metrics(tmp_path: Path) -> None:
    process, port, _ = serve(tmp_path, "--insecure-dev-plaintext")
    counts: list[float] = []
    try:
        deadline = time.monotonic() + 10
        while not (counts and counts[0] >= 3) and time.monotonic() < deadline:
            time.sleep(0.1)  # idle, the probe samples 4 times a second
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
                text = reply.read().decode()
            counts = [
                sample.value
                for family in text_string_to_metric_families(text)
                for sample in family.samples
                if sample.name == "policy_webhook_event_loop_lag_seconds_count"
            ]
    finally:
        process.terminate()
        process.wait(20)
    assert counts and counts[0] >= 3, counts
