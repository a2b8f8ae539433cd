"""The scale benchmark's harness (`bench.scale`): what it checks is checked outside the memory it
measures, and the answer comes back."""

from __future__ import annotations

import resource

from bench import scale


def _grow_then(answer: bool) -> bool:
    held = bytearray(96 * 2**20)
    for at in range(0, len(held), 4096):
        held[at] = 1  # resident, not only reserved
    return answer


def _fails() -> bool:
    raise RuntimeError("a check that breaks")


def test_a_check_run_in_a_child_answers_and_its_memory_is_not_this_process_peak() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert scale._in_a_child(lambda: _grow_then(True)) is True
    assert scale._in_a_child(lambda: _grow_then(False)) is False
    assert scale._in_a_child(_fails) is False
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kb < 48 * 1024  # the children's 96 MB are not in this process's peak
