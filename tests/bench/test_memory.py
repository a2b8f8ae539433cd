"""The memory breakdown (`bench.memory`): each object counted once, and every part it names is
a table the webhook still has — a rename fails here, not on the performance page."""

from __future__ import annotations

import os
import sys
from typing import Any

from bench import memory, snapshot


def test_an_object_two_parts_hold_is_counted_in_the_first_only() -> None:
    shared = "x" * 1000
    weigher = memory._Weigher()
    first = weigher.weigh([shared])
    holder = [shared]
    second = weigher.weigh([holder])
    assert first["bytes"] == sys.getsizeof(shared)
    assert second["bytes"] == sys.getsizeof(holder)  # the list, not the text again
    assert second["top"] == [["list", sys.getsizeof(holder), 1]]


def test_code_and_types_are_not_counted_as_state() -> None:
    weigher = memory._Weigher()
    weighed = weigher.weigh([[len, memory.measure, dict, memory]])
    assert weighed["containers"] == 1  # the list only


class _Compiled:
    """Stands in for a class mypyc compiled, as the core's are in the image: its instances
    have no `__dict__`, and the class names their fields in `__mypyc_attrs__`. (The compiled
    run of `make test` weighs the real ones: `test_a_converged_leader_…` below.)"""

    __slots__ = ("_store", "hits", "never_set")
    __mypyc_attrs__ = ("_store", "hits", "never_set")

    def __init__(self) -> None:
        self._store = {"a": 1}
        self.hits = 3


def test_the_fields_of_a_compiled_class_are_read_as_a_python_objects_dict() -> None:
    class Plain:
        def __init__(self) -> None:
            self._store = {"a": 1}
            self.hits = 3

    compiled = _Compiled()
    assert not hasattr(compiled, "__dict__")
    assert memory.fields(compiled) == memory.fields(Plain()) == {"_store": {"a": 1}, "hits": 3}


def _measured(scale: float) -> dict[str, Any]:
    # A process of its own, as `python -m bench memory` runs it: the harness tunes and freezes
    # the collector as `serve` does, which this test process must not.
    return snapshot.json_of(["-m", "bench.memory", "--scale", str(scale), "--seed", "1"])


def test_a_converged_leader_is_weighed_in_every_part_it_holds() -> None:
    result = _measured(0.02)
    parts = {part["name"]: part for part in result["parts"]}
    assert list(parts) == [name for name, _, _ in memory.PARTS]
    for name in ("store_objects", "contexts", "ladders", "engine", "summary_values"):
        assert parts[name]["bytes"] > 0, name
    # Each non-empty annotation value is one tuple of text fragments (those many values hold
    # alike counted once, some already with the engine's answers); nothing else but None.
    held = {kind: count for kind, _, count in parts["summary_values"]["top"]}
    assert set(held) == {"tuple", "str"}
    assert held["tuple"] == result["summaries_nonempty"] > 0
    assert result["counted_mb"] == sum(part["bytes"] for part in parts.values()) / 1e6
    assert result["objects"] > result["annotated_objects"] > 0
    assert result["core"] == os.environ.get("POLICY_WEBHOOK_EXPECT_CORE", "python")


def test_a_fresh_process_measures_its_memory_above_its_own_start_not_its_parents_peak() -> None:
    """`python -m bench` measures each size in a child; the child inherits its parent's peak
    RSS across fork and exec, so a baseline read as a peak would take the parent's."""
    grown = bytearray(64 * 2**20)
    for at in range(0, len(grown), 4096):
        grown[at] = 1  # resident, not only reserved
    probe = "import json; from bench.scale import resident_mb as now, rss_mb as peak; "
    probe += "print(json.dumps({'now': now(), 'peak': peak()}))"
    measured = snapshot.json_of(["-c", probe])
    now, peak = measured["now"], measured["peak"]
    assert peak - now > 48  # the parent's 64 MB show in the peak the child inherited …
    assert now < 48 + len(grown) / 2**20 / 2  # … and not in what it holds at start
    del grown
