"""Readiness: every declared condition must hold."""

from __future__ import annotations

from webhook.shell.process.readiness import Readiness


def test_declared_conditions_start_pending_so_nothing_is_ready_by_omission() -> None:
    readiness = Readiness("tls", "state-synced", "not-draining")
    assert not readiness()
    assert readiness.reasons() == {
        "tls": "pending",
        "state-synced": "pending",
        "not-draining": "pending",
    }


def test_ready_only_when_every_condition_is_ok_and_reasons_name_the_failing_ones() -> None:
    readiness = Readiness("tls", "state-synced")
    readiness.set("tls", True, "loaded")
    assert not readiness()
    readiness.set("state-synced", True, "synced")
    assert readiness()
    assert readiness.reasons() == {}
    readiness.set("state-synced", False, "watch of HTTPRoute restarting")
    assert not readiness()
    assert readiness.reasons() == {"state-synced": "watch of HTTPRoute restarting"}


def test_no_conditions_means_ready_and_a_new_name_counts_once_set() -> None:
    readiness = Readiness()
    assert readiness()
    readiness.set("not-draining", False, "shutting down")
    assert not readiness()
    assert readiness.conditions()["not-draining"].reason == "shutting down"
