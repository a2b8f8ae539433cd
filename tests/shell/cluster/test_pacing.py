"""The reconciler's adaptive rate (AIMD), on a clock the tests move by hand."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.shell.cluster.pacing import AdaptiveRate

FAST = 0.02  # seconds: a patch answered at the API server's usual pace here


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def rate(ceiling: float = 100.0, **options: Any) -> tuple[AdaptiveRate, Clock]:
    clock = Clock()
    return AdaptiveRate(ceiling, clock=clock, **options), clock


def test_it_starts_at_the_ceiling_and_never_goes_above_it() -> None:
    pacing, clock = rate(100.0)
    assert pacing.rate == 100.0
    for _ in range(1000):
        clock.now += 0.01
        pacing.succeeded(FAST)
    assert pacing.rate == 100.0


def send(pacing: AdaptiveRate, clock: Clock, seconds: float, *, every: float | None = None) -> None:
    """Patches answered at `every` seconds apart (at the allowed rate if None) for `seconds`."""
    until = clock.now + seconds
    while clock.now < until:
        clock.now += every if every is not None else 1 / pacing.rate
        pacing.succeeded(FAST)


def test_a_429_halves_the_rate() -> None:
    pacing, clock = rate(100.0)
    send(pacing, clock, 1.0)
    pacing.throttled()
    assert pacing.rate == pytest.approx(50.0, rel=0.02) and pacing.decreases == 1


def test_a_decrease_starts_from_the_rate_patches_actually_went_at() -> None:
    """A ceiling of 1,000/s while the API server answers 100 a second: halving the ceiling
    would slow nothing; half of what went through does."""
    pacing, clock = rate(1000.0)
    send(pacing, clock, 2.0, every=0.01)
    assert pacing.rate == 1000.0 and pacing.achieved == pytest.approx(100.0, rel=0.02)
    pacing.throttled()
    assert pacing.rate == pytest.approx(50.0, rel=0.02)


def test_the_answers_to_patches_already_in_flight_cut_the_rate_only_once() -> None:
    pacing, clock = rate(100.0, cooldown=1.0)
    send(pacing, clock, 1.0)
    for _ in range(8):  # eight 429s within the same second: one congestion
        clock.now += 0.01
        pacing.throttled()
    assert pacing.rate == pytest.approx(50.0, rel=0.1) and pacing.decreases == 1
    send(pacing, clock, 1.0)
    pacing.throttled()
    assert pacing.decreases == 2 and pacing.rate < 40.0


def test_it_never_goes_below_the_floor() -> None:
    pacing, clock = rate(100.0, floor=2.0)
    for _ in range(50):
        clock.now += 2.0
        pacing.throttled()
    assert pacing.rate == 2.0


def test_it_grows_back_by_about_increase_per_second_of_successes() -> None:
    pacing, clock = rate(100.0, increase=10.0)
    pacing.throttled()
    assert pacing.rate == 50.0
    while clock.now < 102.0:  # two seconds of patches sent at the allowed rate
        clock.now += 1 / pacing.rate
        pacing.succeeded(FAST)
    assert 68.0 <= pacing.rate <= 72.0, "+10/s for 2 s"
    while pacing.rate < 100.0:
        clock.now += 1 / pacing.rate
        pacing.succeeded(FAST)
    assert pacing.rate == 100.0


def test_latency_well_above_the_lowest_seen_is_taken_for_queueing() -> None:
    pacing, clock = rate(100.0, slow_factor=4.0, slow_floor=0.05, smoothing=0.5)
    for _ in range(20):
        clock.now += 0.01
        pacing.succeeded(FAST)
    assert not pacing.slow and pacing.baseline == FAST
    for _ in range(10):  # the API server starts queueing us: ten times slower
        clock.now += 0.3
        pacing.succeeded(10 * FAST)
    assert pacing.slow and pacing.rate < 100.0 * 0.8**2


def test_slow_answers_below_the_floor_are_not_slow() -> None:
    """Against a lowest latency of 1 ms, 10 ms is ten times that, but no API server is queueing there."""
    pacing, clock = rate(100.0, slow_factor=4.0, slow_floor=0.25)
    pacing.succeeded(0.001)
    for _ in range(50):
        clock.now += 0.5
        pacing.succeeded(0.010)
    assert not pacing.slow and pacing.rate == 100.0 and pacing.decreases == 0


def test_the_lowest_latency_is_forgotten_after_two_windows() -> None:
    pacing, clock = rate(100.0, window=30.0)
    pacing.succeeded(0.001)
    clock.now += 31.0
    pacing.succeeded(0.050)
    assert pacing.baseline == 0.001, "still in the previous window"
    clock.now += 31.0
    pacing.succeeded(0.050)
    assert pacing.baseline == 0.050


@pytest.mark.parametrize(
    "options",
    [{"floor": 0.0}, {"floor": 200.0}, {"decrease": 1.0}, {"smoothing": 0.0}],
)
def test_nonsense_settings_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        AdaptiveRate(100.0, **options)


def test_a_ceiling_below_one_patch_a_second_is_its_own_floor() -> None:
    pacing, clock = rate(0.5)
    clock.now += 10.0
    pacing.throttled()
    assert pacing.rate == 0.5
