"""SPEC §2.5: a warning is one line of at most 120 characters, rule ID and field included.

The rules write their messages to fit (`findings.line_room`, `findings.listed`); a line that
quotes a name too long for any wording (a Kubernetes name may have 253 characters) is cut where
it is sent as a warning, and kept whole in the decision log and `policy-webhook check`.
"""

from __future__ import annotations

import pytest
import yaml

from tests.core.rules.test_impact import ROUTE, admit, lines, retry
from tests.core.rules.test_realworld import CASES, placed, state_paths
from tests.fixtures.engine import CLUSTER, CRDS, store_of
from tests.fixtures.paths import EXAMPLES
from webhook.core.admission import validation as admission
from webhook.core.model.profiles import KindProfile
from webhook.core.model.refs import GroupKind, key_of
from webhook.core.model.settings import Settings
from webhook.core.rules import targets
from webhook.core.rules.findings import (
    MAX_WARNING_LINE,
    Finding,
    Judged,
    Verdict,
    line_room,
    listed,
)
from webhook.shell.cli.manifests import load_store


def test_a_list_that_fits_is_whole() -> None:
    assert listed(["a", "b", "c"], 7) == "a, b, c"


def test_a_list_that_does_not_fit_shows_what_fits_and_counts_the_rest() -> None:
    assert listed(["alpha", "beta", "gamma", "delta"], 20) == "alpha, beta +2 more"
    assert len(listed(["alpha", "beta", "gamma", "delta"], 20)) <= 20


def test_a_list_shows_one_item_however_little_room_there_is() -> None:
    assert listed(["a-very-long-field-name", "b"], 5) == "a-very-long-field-name +1 more"


def test_the_room_is_what_the_rule_id_and_the_field_leave() -> None:
    field = "spec.targetRefs[0]"
    room = line_room("PA-C01", field)
    assert len(Finding("PA-C01", field, "x" * room).text) == MAX_WARNING_LINE


def test_a_warning_too_long_for_any_wording_is_cut_in_the_middle_of_the_line() -> None:
    """The rule, the field and how the line ends stay: the cut falls in the quoted name."""
    long_name = "n" * 253
    message = f"HTTPRoute/apps/{long_name} does not exist (yet); no effect until it does"
    finding = Finding("PA-T06", "spec.targetRefs[0]", message)
    (line,) = Verdict((Judged(finding, "warn"),)).warning_lines()
    assert len(line) == MAX_WARNING_LINE
    assert line.startswith("[PA-T06] spec.targetRefs[0]: HTTPRoute/apps/nnn")
    assert line.endswith("n does not exist (yet); no effect until it does")
    assert line.count("…") == 1 and len(finding.text) > MAX_WARNING_LINE


def test_an_inherited_conflict_lists_the_fields_that_fit_and_counts_the_rest() -> None:
    fields = ", ".join(f"field{i:02d}WithALongName: {i}" for i in range(12))
    store = store_of(CRDS, CLUSTER, retry("older", "apps", ROUTE, f"default: {{{fields}}}"))
    verdict = admit(
        store, retry("newer", "apps", ROUTE, f"default: {{{fields}}}", "2026-02-01T00:00:00Z")
    )
    (line,) = lines(verdict, "PA-C01")
    assert len(line) <= MAX_WARNING_LINE
    assert line.startswith("[PA-C01] spec.targetRefs[0]: older targets it too and wins on ")
    assert line.endswith(" more") and "field00WithALongName" in line


GATEWAY_API = "gateway.networking.k8s.io"


def _not_known(target_kind: str, *allowed: GroupKind) -> str:
    """PA-T01 for a RetryPolicy that knows `allowed` and targets `target_kind` (core group)."""
    profile = KindProfile(
        GroupKind("policies.example.com", "RetryPolicy"), allowed_targets=frozenset(allowed)
    )
    field = "spec.targetRefs[0].kind"
    (finding,) = targets._kind_allowed(GroupKind("", target_kind), field, profile=profile)
    assert finding.rule_id == "PA-T01"
    return finding.text


def test_pa_t01_names_both_kinds_and_what_is_known_where_the_line_has_room() -> None:
    assert _not_known("Secret", GroupKind("", "Service")) == (
        "[PA-T01] spec.targetRefs[0].kind: RetryPolicy is not known to target Secret "
        "(known: Service (core)); effect not shown"
    )


def test_pa_t01_lists_the_known_kinds_that_fit_and_counts_the_rest() -> None:
    routes = ("GRPCRoute", "Gateway", "HTTPRoute", "ListenerSet", "TCPRoute", "TLSRoute")
    line = _not_known("Service", *(GroupKind(GATEWAY_API, kind) for kind in routes))
    assert line == (
        "[PA-T01] spec.targetRefs[0].kind: not a known target, effect not shown "
        "(known: GRPCRoute, Gateway, HTTPRoute +3 more)"
    )
    assert len(line) <= MAX_WARNING_LINE


def _warning_texts(verdict: Verdict) -> list[str]:
    return [finding.text for finding in verdict.warnings]


def test_every_warning_on_the_vendors_published_policies_fits_its_line_as_written() -> None:
    """As written, before any cut: the messages are worded to fit, not cut to fit."""
    store, _ = load_store(state_paths())
    too_long = []
    for case in CASES:
        obj = placed(case, store)
        key = key_of(obj)
        assert key is not None
        verdict = admission.check_policy(obj, key.group_kind, view=store, settings=Settings())
        too_long += [t for t in _warning_texts(verdict) if len(t) > MAX_WARNING_LINE]
    assert too_long == []


@pytest.mark.parametrize("folder", ["broken", "cluster"])
def test_every_warning_on_the_example_policies_fits_its_line_as_written(folder: str) -> None:
    cluster, _ = load_store([str(EXAMPLES / "cluster")])
    too_long, checked = [], 0
    for path in sorted((EXAMPLES / folder).rglob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            key = key_of(obj) if isinstance(obj, dict) else None
            if key is None or not cluster.is_policy_object(key.group_kind, obj):
                continue
            verdict = admission.check_policy(obj, key.group_kind, view=cluster, settings=Settings())
            checked += 1
            too_long += [
                f"{path.name}: {t}" for t in _warning_texts(verdict) if len(t) > MAX_WARNING_LINE
            ]
    assert checked >= 8 and too_long == []
