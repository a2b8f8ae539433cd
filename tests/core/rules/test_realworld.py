"""Real-world policies (SPEC's first principle): the vendors' published shapes, admitted alone
against `tests/realworld/state.yaml` with vendor-shaped CRDs, each with the verdict and the
rules it must get — through the webhook's entry point and through `policy-webhook check`.

The table is `tests/realworld/cases.yaml` (see the README there). PA-C04, the impact preview,
is left out of the comparison: a lone policy on an existing target always changes it.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Mapping
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures.paths import REALWORLD
from webhook.core.admission import validation as admission
from webhook.core.model import kinds, scopes
from webhook.core.model.refs import key_of
from webhook.core.model.settings import Settings
from webhook.core.rules.findings import Verdict
from webhook.core.state.store import Store
from webhook.shell.cli import main as cli
from webhook.shell.cli.manifests import load_store

CASES: list[dict[str, Any]] = yaml.safe_load((REALWORLD / "cases.yaml").read_text(encoding="utf-8"))
# One per CRD file: a project whose CRDs are here has its published shapes in the table.
VENDORS = tuple(sorted(p.stem for p in (REALWORLD / "crds").glob("*.yaml")))


def state_paths() -> list[str]:
    return [str(REALWORLD / "crds"), str(REALWORLD / "state.yaml")]


@pytest.fixture(scope="module")
def state() -> Store:
    store, _ = load_store(state_paths())
    return store


def placed(case: Mapping[str, Any], store: Store) -> Mapping[str, Any]:
    """The policy as `kubectl apply -n <namespace>` would send it."""
    cluster_scoped = scopes.cluster_scoped_kinds(store.objects(kinds.CRD))
    return scopes.as_applied(
        case["policy"], namespace=case.get("namespace", "default"), cluster_scoped=cluster_scoped
    )


def verdict_of(verdict: Verdict) -> str:
    if not verdict.allowed:
        return "denied"
    return "warned" if any(f.rule_id != "PA-C04" for f in verdict.warnings) else "allowed"


def rules_of(verdict: Verdict) -> set[str]:
    return set(verdict.rule_ids) - {"PA-C04"}


GROUPS = {
    "gateway.networking.k8s.io": "gateway-api",
    "gateway.networking.x-k8s.io": "gateway-api",
    "gateway.envoyproxy.io": "envoy-gateway",
    "kuadrant.io": "kuadrant",
    "gateway.nginx.org": "nginx-gateway-fabric",
    "gateway.kgateway.dev": "kgateway",
    "policy.linkerd.io": "linkerd",
    "aigateway.envoyproxy.io": "envoy-ai-gateway",
}


def vendor_of(case: Mapping[str, Any]) -> str:
    return GROUPS[str(case["policy"]["apiVersion"]).split("/")[0]]


def test_the_table_covers_every_project_with_published_and_forbidden_shapes() -> None:
    published = [c for c in CASES if c["expect"]["verdict"] != "denied"]
    counts = {v: sum(vendor_of(c) == v for c in published) for v in VENDORS}
    assert all(n >= 6 for n in counts.values()), counts
    assert len(published) >= 40
    assert sum(c["expect"]["verdict"] == "denied" for c in CASES) >= 8
    assert len({c["name"] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_a_published_policy_gets_the_verdict_its_shape_deserves(
    state: Store, case: Mapping[str, Any]
) -> None:
    obj = placed(case, state)
    key = key_of(obj)
    assert key is not None
    verdict = admission.check_policy(obj, key.group_kind, view=state, settings=Settings())
    found = (verdict_of(verdict), rules_of(verdict))
    expected = (case["expect"]["verdict"], set(case["expect"]["rules"]))
    assert found == expected, "\n".join(f.text for f in verdict.denials + verdict.warnings)


def test_check_gives_every_published_policy_the_same_verdict(tmp_path: Path) -> None:
    """`policy-webhook check -n NS`: the same answers, read from files as published (most
    without `metadata.namespace`)."""
    failures = []
    for case in CASES:
        folder = tmp_path / case["name"]
        folder.mkdir()
        (folder / "policy.yaml").write_text(yaml.safe_dump(case["policy"]), encoding="utf-8")
        out = io.StringIO()
        argv = ["check", "-o", "json", "-n", case.get("namespace", "default")]
        with redirect_stdout(out):
            code = cli.main([*argv, *state_paths(), str(folder)])
        report = yaml.safe_load(out.getvalue())
        (mine,) = [
            p for p in report["policies"] if p["file"].endswith(f"{case['name']}/policy.yaml")
        ]
        rules = {f["rule"] for f in mine["findings"] if f["action"] != "audit"} - {"PA-C04"}
        denied = case["expect"]["verdict"] == "denied"
        if (
            (code == 1) != denied
            or mine["allowed"] == denied
            or rules != set(case["expect"]["rules"])
        ):
            failures.append(f"{case['name']}: exit {code}, rules {sorted(rules)}")
    assert not failures, textwrap.indent("\n".join(failures), "  ")
