"""The end-to-end benchmark's harness ends every process it started, by PID, even when a phase
fails. No control plane here: the one step under test is driven with a stand-in for `serve`
(a real one would need an API server that refuses to settle on cue)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest

from bench import e2e, e2e_procs, promtext


class _StandInOurs:
    """What `start_ours` asks of `e2e_procs.Ours`: start, then stop by PID."""

    made: ClassVar[list[_StandInOurs]] = []
    core: ClassVar[str] = "compiled"  # what its build_info says it runs

    def __init__(self, cluster: Any, workdir: Path, *, name: str, args: Any) -> None:
        self.name = name
        self.code_root: Path | None = None
        self.stops = 0
        _StandInOurs.made.append(self)

    def start(self) -> None:
        pass

    def samples(self) -> promtext.Samples:
        return promtext.parse(f'policy_webhook_build_info{{core="{self.core}"}} 1.0\n')

    def stop(self) -> None:
        self.stops += 1


@pytest.fixture
def bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> e2e.Bench:
    """A `Bench` without its control plane (its `__init__` provisions one), starting stand-ins."""
    _StandInOurs.made.clear()
    monkeypatch.setattr(e2e_procs, "Ours", _StandInOurs)
    monkeypatch.setattr(_StandInOurs, "core", "compiled")
    bench = e2e.Bench.__new__(e2e.Bench)
    bench.cluster, bench.workdir, bench.started, bench.base_root = None, tmp_path, 0, None
    bench.config = e2e.QUICK  # ours compiled, as shipped
    return bench


def test_ours_running_another_core_than_the_part_measures_is_stopped_and_refused(
    bench: e2e.Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench, "wait_idle", lambda ours, *, timeout, quiet=2.0: 0.5)
    monkeypatch.setattr(_StandInOurs, "core", "python")
    with pytest.raises(RuntimeError, match="ours-1 does not run the compiled core"):
        bench.start_ours()
    assert [ours.stops for ours in _StandInOurs.made] == [1]


def test_ours_that_never_settles_is_stopped_before_the_error_goes_up(
    bench: e2e.Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never_settles(ours: Any, *, timeout: float, quiet: float = 2.0) -> float:
        raise TimeoutError(f"{ours.name} did not settle within {timeout:.0f} s")

    monkeypatch.setattr(bench, "wait_idle", never_settles)
    with pytest.raises(TimeoutError, match="ours-1 did not settle"):
        bench.start_ours()
    assert [ours.stops for ours in _StandInOurs.made] == [1]


def test_ours_that_settles_is_handed_over_running(
    bench: e2e.Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench, "wait_idle", lambda ours, *, timeout, quiet=2.0: 0.5)
    ours = bench.start_ours()
    assert ours is _StandInOurs.made[0]
    assert ours.stops == 0


def test_the_api_servers_requests_of_a_phase_are_counted_by_verb_and_resource() -> None:
    def scrape(creates: int, patches: int, conflicts: int = 1) -> promtext.Samples:
        return promtext.parse(
            f"""# TYPE apiserver_request_total counter
apiserver_request_total{{code="201",group="gateway.networking.k8s.io",resource="httproutes",subresource="",verb="POST",version="v1"}} {creates}
apiserver_request_total{{code="200",group="",resource="services",subresource="",verb="PATCH",version="v1"}} {patches}
apiserver_request_total{{code="200",group="",resource="services",subresource="status",verb="PATCH",version="v1"}} 4
apiserver_request_total{{code="409",group="",resource="services",subresource="",verb="PATCH",version="v1"}} {conflicts}
"""
        )

    counted = e2e.requests(scrape(100, 7), scrape(400, 10, conflicts=2))
    # The series of one verb and resource add up, whatever their code; a subresource whose
    # count did not move is left out.
    assert counted == {"post httproutes": 300, "patch services": 4}


def test_a_few_milliseconds_of_cpu_read_as_themselves_not_as_a_tick() -> None:
    """The growth probes' reading: `/proc/<pid>/stat` counts 10 ms ticks, so a route event of
    3 ms read 0 or 10; the scheduler's per-thread account reads it to the nanosecond."""

    def burn(seconds: float) -> None:  # on this thread's own CPU clock
        until = time.thread_time() + seconds
        while time.thread_time() < until:
            pass

    pid = os.getpid()
    before = e2e_procs.thread_cpu_seconds(pid)
    burn(0.003)
    spent = e2e_procs.thread_cpu_seconds(pid) - before
    assert 0.003 <= spent < 0.009, spent  # neither 0 nor a whole tick
    before = e2e_procs.thread_cpu_seconds(pid)
    burn(0.05)
    assert 0.05 <= e2e_procs.thread_cpu_seconds(pid) - before < 0.08
