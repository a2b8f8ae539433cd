"""`heap.settle`: what is garbage is collected, what is alive is frozen out of later passes."""

from __future__ import annotations

import gc
import logging
import weakref
from collections.abc import Iterator

import pytest

from webhook.shell.process import heap


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    """Every other test runs with nothing frozen, as a process that never settled."""
    yield
    gc.unfreeze()


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_settle_collects_cyclic_garbage_first_and_freezes_what_is_alive(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dead_a, dead_b = Node(), Node()
    dead_a.other, dead_b.other = dead_b, dead_a  # a cycle: only the collector frees it
    gone = weakref.ref(dead_a)
    del dead_a, dead_b
    alive = {"state": [Node()]}

    with caplog.at_level(logging.INFO, logger=heap.__name__):
        pause = heap.settle("test")

    assert gone() is None, "garbage present at settle time must not be frozen for good"
    (record,) = caplog.records  # one line, carrying what was returned and what was frozen
    logged = record.fields  # type: ignore[attr-defined]
    assert (logged["reason"], logged["pause_s"]) == ("test", round(pause, 3))
    assert logged["collected"] >= 2  # the two Nodes at least
    # Frozen objects can still die by reference count after the freeze, never join it.
    assert logged["frozen"] >= gc.get_freeze_count() > 0
    # A frozen object is out of every later collection: it is not among the tracked objects.
    assert not any(obj is alive for obj in gc.get_objects())
    assert gc.is_tracked(alive)


def test_held_stops_automatic_collection_inside_and_restores_it_after() -> None:
    assert gc.isenabled()
    with heap.held():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), heap.held():
        raise ValueError("a body the decoder refuses")
    assert gc.isenabled(), "an error inside must not leave the collector off"


def test_held_leaves_a_collector_that_was_off_off() -> None:
    gc.disable()
    try:
        with heap.held():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_tune_makes_full_passes_rarer_and_leaves_the_young_generations_alone() -> None:
    before = gc.get_threshold()
    try:
        heap.tune()
        young, middle, full = gc.get_threshold()
        assert (young, middle) == before[:2]
        assert full == heap.FULL_PASS_AFTER > before[2]
    finally:
        gc.set_threshold(*before)


def _resident_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(heap._malloc_trim() is None, reason="no glibc: release() does nothing there")
def test_release_gives_back_the_free_pages_between_blocks_still_in_use() -> None:
    """Blocks over 512 bytes come from the C heap; dropped between others still in use, they
    leave holes that stay resident, which `release` hands back to the system."""
    kept: list[bytearray] = []
    dropped: list[bytes] = []
    for _ in range(10_000):
        dropped += (b"x" * (3000 + i) for i in range(4))  # text a computation makes and drops
        kept.append(bytearray(600))  # what stays, in between
    del dropped
    before = _resident_mb()
    assert heap.release() is True
    assert before - _resident_mb() > 60  # of the 120 MB of holes, the whole pages
    assert len(kept) == 10_000
