"""`bench.route_event`'s cold mode: the caches evicted before each route event, the event's
figures and the Service's value as without it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import route_event


@pytest.mark.parametrize(
    ("spelt", "expected"),
    [("32768K\n", 32 * 1024 * 1024), ("1M", 1024 * 1024), ("512", 512), ("2048k", 2 << 20)],
)
def test_a_cache_size_is_read_as_sysfs_spells_it(spelt: str, expected: int) -> None:
    assert route_event.cache_bytes(spelt) == expected


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """What each eviction writes into its buffer."""
    seen: list[bytes] = []

    class Watched(bytearray):
        def __setitem__(self, index: slice, value: bytes) -> None:  # type: ignore[override]
            seen.append(bytes(value))
            super().__setitem__(index, value)

    monkeypatch.setattr(route_event, "bytearray", Watched, raising=False)
    return seen


def test_the_evictor_writes_twice_the_last_level_cache_alternating_its_contents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, written: list[bytes]
) -> None:
    size_file = tmp_path / "size"
    size_file.write_text("64K\n", encoding="ascii")
    monkeypatch.setattr(route_event, "LAST_LEVEL_CACHE", size_file)
    evict = route_event.evictor()
    evict()
    evict()
    assert [len(fill) for fill in written] == [128 * 1024, 128 * 1024]
    assert written[0] != written[1]  # each eviction rewrites every byte of the buffer


def test_without_a_size_the_evictor_falls_back_to_twice_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, written: list[bytes]
) -> None:
    monkeypatch.setattr(route_event, "LAST_LEVEL_CACHE", tmp_path / "absent")
    monkeypatch.setattr(route_event, "DEFAULT_CACHE_BYTES", 4096)
    route_event.evictor()()
    assert [len(fill) for fill in written] == [8192]


def test_a_cold_measure_evicts_before_each_event_times_every_step_and_keeps_the_value_right(
    monkeypatch: pytest.MonkeyPatch, written: list[bytes]
) -> None:
    monkeypatch.setattr(route_event, "DEFAULT_CACHE_BYTES", 1 << 20)
    monkeypatch.setattr(route_event, "LAST_LEVEL_CACHE", Path("/nonexistent/size"))
    result = route_event.measure(20, 3, cold=True)
    assert len(written) == 3  # one eviction per route event
    assert all(len(result[f"{step}_ms"]) == 3 for step in route_event.STEPS)
    assert result["consistent"] is True


def test_a_hot_measure_evicts_nothing(written: list[bytes]) -> None:
    route_event.measure(20, 2)
    assert written == []
