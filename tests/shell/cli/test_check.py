"""`policy-webhook check` on the bundled examples: exit codes and the findings on each file.

Every file in examples/broken/ states what it should trigger in a leading `# expect:` line;
this test holds the rules to those statements, so the examples and the code cannot drift.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.paths import EXAMPLES
from webhook.shell.cli.main import main

BROKEN = sorted((EXAMPLES / "broken").glob("*.yaml"))


def expected_rules(path: Path) -> set[str]:
    match = re.search(r"^# expect: (.+?) —", path.read_text(encoding="utf-8"), re.MULTILINE)
    assert match, f"{path.name} lacks an `# expect:` line"
    return {rule.strip() for rule in match.group(1).split(",")}


def run_check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["check", *args])
    return code, capsys.readouterr().out


def test_the_good_cluster_passes_with_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_check(capsys, str(EXAMPLES / "cluster"))
    assert code == 0
    assert " 0 denied" in out


@pytest.mark.parametrize("path", BROKEN, ids=lambda p: p.stem)
def test_each_broken_example_triggers_exactly_what_it_says(
    capsys: pytest.CaptureFixture[str], path: Path
) -> None:
    code, out = run_check(capsys, "-o", "json", str(EXAMPLES / "cluster"), str(path))
    report = json.loads(out)
    (checked,) = [p for p in report["policies"] if p["file"] == str(path)]
    fired = {finding["rule"] for finding in checked["findings"]}
    assert fired == expected_rules(path)
    denies = any(f["action"] == "deny" for f in checked["findings"])
    assert code == (1 if denies else 0)
    assert checked["allowed"] is not denies


def test_all_broken_examples_together_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_check(capsys, str(EXAMPLES / "cluster"), str(EXAMPLES / "broken"))
    assert code == 1
    assert "[PA-S01] spec.targetRef:" in out


def test_strict_denies_the_warning_only_examples(capsys: pytest.CaptureFixture[str]) -> None:
    path = EXAMPLES / "broken" / "t06-target-does-not-exist.yaml"
    assert run_check(capsys, str(EXAMPLES / "cluster"), str(path))[0] == 0
    assert run_check(capsys, "--strict", str(EXAMPLES / "cluster"), str(path))[0] == 1


def test_a_missing_path_is_a_usage_error_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(EXAMPLES / "nope")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_a_broken_yaml_file_names_file_and_line_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\n  labels: [unclosed\n",
        encoding="utf-8",
    )
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:" in err and "not valid YAML" in err
    assert re.search(rf"{re.escape(str(bad))}:\d+:", err)


def test_a_bad_config_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("ruleActions: {PA-T99: deny}\n", encoding="utf-8")
    assert main(["check", "--config", str(config), str(EXAMPLES / "cluster")]) == 2
    assert "unknown rule 'PA-T99'" in capsys.readouterr().err


def test_the_console_script_runs_as_a_process() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "webhook.shell.cli.main", "check", str(EXAMPLES / "cluster")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


NAMESPACELESS = """
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {name: retry-storefront}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: storefront}]
  default: {maxRetries: 2}
"""


def test_a_policy_without_a_namespace_is_judged_in_the_namespace_n_gives_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """SPEC §7 rev. 2: as `kubectl apply -n` would send it — not as a cluster-scoped policy."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(NAMESPACELESS, encoding="utf-8")
    code, out = run_check(
        capsys, "-o", "json", "-n", "apps", str(EXAMPLES / "cluster"), str(policy)
    )
    (mine,) = [p for p in json.loads(out)["policies"] if p["file"] == str(policy)]
    assert code == 0 and mine["namespace"] == "apps"
    # It meets the route and the policies already on it, in `apps`.
    assert {f["rule"] for f in mine["findings"]} == {"PA-C01", "PA-C02"}
    code, out = run_check(capsys, "-o", "json", str(EXAMPLES / "cluster"), str(policy))
    (mine,) = [p for p in json.loads(out)["policies"] if p["file"] == str(policy)]
    assert code == 0 and mine["namespace"] == "default"
    assert {f["rule"] for f in mine["findings"]} == {"PA-T06"}  # no storefront in `default`


def test_a_cluster_scoped_object_keeps_no_namespace(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    gateway_class = tmp_path / "class.yaml"
    gateway_class.write_text(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\n"
        "metadata: {name: other, namespace: apps}\nspec: {controllerName: example.net/x}\n",
        encoding="utf-8",
    )
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        NAMESPACELESS.replace(
            "kind: HTTPRoute, name: storefront", "kind: GatewayClass, name: other"
        ),
        encoding="utf-8",
    )
    code, out = run_check(capsys, "-o", "json", str(EXAMPLES / "cluster"), str(tmp_path))
    (mine,) = [p for p in json.loads(out)["policies"] if p["file"] == str(policy)]
    # A namespaced policy on the GatewayClass found by its cluster-wide name: PA-T10 only.
    assert code == 0 and {f["rule"] for f in mine["findings"]} - {"PA-C04"} == {"PA-T10"}
