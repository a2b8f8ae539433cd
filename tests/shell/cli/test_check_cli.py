"""`policy-webhook check` as CI runs it: the console script in a new process, fed files,
folders of real repository content, or standard input; every output format parsed back.

What a CI job relies on: the exit code (0 nothing denied, 1 denied, 2 usage or read error,
never a traceback), one note per document that is not an object, duplicates named with both
files, and findings that point at the file and line of their field.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures.console import Ran, run
from tests.fixtures.paths import EXAMPLES

CLUSTER = EXAMPLES / "cluster"
BROKEN = EXAMPLES / "broken"


def stream_of(*paths: Path) -> str:
    """What `kubectl kustomize` prints: every document, separated by `---`."""
    docs = []
    for path in paths:
        files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
        for file in files:
            docs += [d for d in yaml.safe_load_all(file.read_text(encoding="utf-8")) if d]
    return yaml.safe_dump_all(docs, sort_keys=False)


def no_traceback(ran: Ran) -> None:
    assert "Traceback" not in ran.err, ran


def line_of(path: Path, text: str) -> int:
    """The 1-based line of the first line of `path` that contains `text`."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


# --- a folder as a repository holds it ------------------------------------------------------

KUSTOMIZATION = """\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [policies/retry.yaml]
"""
HELM_VALUES = "replicaCount: 2\nimage: {repository: nginx, tag: stable}\n"
PACKAGE_JSON = '{"name": "site", "version": "1.0.0", "scripts": {"test": "jest"}}\n'
CHART = "apiVersion: v2\nname: site\nversion: 0.1.0\n"
HELM_TEMPLATE = """\
{{- if .Values.enabled }}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}
{{- end }}
"""
GOOD_POLICY = """\
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {name: retry-cart, namespace: shop}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: cart}]
  default: {maxRetries: 2}
"""


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    files = {
        "kustomization.yaml": KUSTOMIZATION,
        "values.yaml": HELM_VALUES,
        "package.json": PACKAGE_JSON,
        "chart/Chart.yaml": CHART,
        "chart/templates/configmap.yaml": HELM_TEMPLATE,
        "policies/retry.yaml": GOOD_POLICY,
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def test_a_repository_folder_is_checked_and_what_is_not_an_object_is_skipped_with_a_note(
    repository: Path,
) -> None:
    ran = run("check", str(CLUSTER), str(repository))
    assert ran.code == 0, ran
    no_traceback(ran)
    notes = [line for line in ran.err.splitlines() if "skipped" in line]
    assert len(notes) == 5, ran  # kustomization, values, package.json, Chart.yaml, template
    for name in (
        "kustomization.yaml",
        "values.yaml",
        "package.json",
        "Chart.yaml",
        "configmap.yaml",
    ):
        assert sum(name in note for note in notes) == 1, (name, notes)
    assert all(note.startswith("policy-webhook: note: ") for note in notes)
    assert "RetryPolicy/shop/retry-cart" in ran.out
    assert ran.out.rstrip().endswith("5 documents skipped")


def test_the_json_document_lists_what_was_skipped(repository: Path) -> None:
    report = json.loads(run("check", "-o", "json", str(CLUSTER), str(repository)).out)
    reasons = {Path(s["file"]).name: s["reason"] for s in report["skipped"]}
    assert "kustomization" in reasons["kustomization.yaml"].lower()
    assert "template" in reasons["configmap.yaml"]
    assert report["summary"]["skipped"] == 5


# --- standard input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected_code"),
    [
        (["check", "-"], 0),
        (["check", "-f", "-"], 0),
        (["check", "--filename", "-", "-o", "json"], 0),
    ],
    ids=["dash", "f-dash", "filename-dash-json"],
)
def test_standard_input_is_read_like_kubectl_apply_f_dash(
    args: list[str], expected_code: int
) -> None:
    ran = run(*args, stdin=stream_of(CLUSTER))
    assert ran.code == expected_code, ran
    no_traceback(ran)
    assert "<stdin>:" in ran.out or '"<stdin>"' in ran.out


def test_a_denied_policy_on_standard_input_exits_1_with_its_line_in_the_stream() -> None:
    ran = run("check", "-", stdin=stream_of(CLUSTER, BROKEN / "s01-targetref-and-targetrefs.yaml"))
    assert ran.code == 1, ran
    denial = next(line for line in ran.out.splitlines() if "[PA-S01]" in line)
    assert re.match(r"<stdin>:\d+: RetryPolicy/apps/retry-both-ref-fields DENY", denial)


def test_standard_input_and_files_combine(tmp_path: Path) -> None:
    t06 = BROKEN / "t06-target-does-not-exist.yaml"
    ran = run("check", "-", str(t06), stdin=stream_of(CLUSTER))
    assert ran.code == 0, ran
    assert "[PA-T06]" not in ran.out or "t06-target-does-not-exist.yaml" in ran.out
    (warning,) = [line for line in ran.out.splitlines() if "[PA-T06]" in line]
    assert warning.startswith(f"{t06}:"), warning
    assert "RetryPolicy/apps/retry-missing-route WARN" in warning
    # The stream's objects are the state the file's policy is judged against, and its
    # policies are checked too.
    on_storefront = tmp_path / "storefront.yaml"
    policy = GOOD_POLICY.replace("shop", "apps").replace("cart", "storefront")
    on_storefront.write_text(policy, encoding="utf-8")
    report = json.loads(
        run("check", "-o", "json", "-", str(on_storefront), stdin=stream_of(CLUSTER)).out
    )
    assert {p["file"] for p in report["policies"]} == {"<stdin>", str(on_storefront)}
    assert report["duplicates"] == []
    (mine,) = [p for p in report["policies"] if p["file"] == str(on_storefront)]
    rules = {f["rule"] for f in mine["findings"]}
    assert "PA-T06" not in rules and "PA-C01" in rules, rules  # the route and its policy


# --- duplicates -----------------------------------------------------------------------------


def test_the_same_object_in_two_files_is_reported_with_both(tmp_path: Path) -> None:
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(GOOD_POLICY, encoding="utf-8")
    second.write_text(GOOD_POLICY.replace("maxRetries: 2", "maxRetries: 4"), encoding="utf-8")
    ran = run("check", str(CLUSTER), str(first), str(second))
    assert ran.code == 0, ran
    (line,) = [line for line in ran.out.splitlines() if "DUPLICATE" in line]
    assert f"{second}:1" in line and f"{first}:1" in line
    report = json.loads(run("check", "-o", "json", str(CLUSTER), str(first), str(second)).out)
    (duplicate,) = report["duplicates"]
    assert duplicate["name"] == "retry-cart" and duplicate["namespace"] == "shop"
    assert duplicate["used"]["file"] == str(second) and duplicate["ignored"]["file"] == str(first)
    assert report["summary"]["duplicates"] == 1


def test_a_file_named_twice_is_read_once(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(GOOD_POLICY, encoding="utf-8")
    report = json.loads(run("check", "-o", "json", str(CLUSTER), str(tmp_path), str(policy)).out)
    assert report["duplicates"] == []


# --- at most 10 warnings per policy ----------------------------------------------------------

SIXTEEN_MISSING = (
    """\
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {name: retry-many, namespace: apps}
spec:
  targetRefs:
"""
    + "".join(
        f"    - {{group: gateway.networking.k8s.io, kind: HTTPRoute, name: missing-{i}}}\n"
        for i in range(16)
    )
    + "  default: {maxRetries: 2}\n"
)


def test_warnings_are_capped_at_ten_lines_per_policy_unless_all(tmp_path: Path) -> None:
    policy = tmp_path / "many.yaml"
    policy.write_text(SIXTEEN_MISSING, encoding="utf-8")
    capped = run("check", str(CLUSTER), str(policy))
    mine = [line for line in capped.out.splitlines() if "retry-many" in line]
    assert len(mine) == 10, capped
    assert mine[-1].endswith("... and 7 more warnings (--all shows them)")
    every = run("check", "--all", str(CLUSTER), str(policy))
    assert sum("[PA-T06]" in line for line in every.out.splitlines()) == 16
    report = json.loads(run("check", "-o", "json", str(CLUSTER), str(policy)).out)
    (entry,) = [p for p in report["policies"] if p["name"] == "retry-many"]
    assert sum(f["rule"] == "PA-T06" for f in entry["findings"]) == 16  # machines get all
    lines = [f["line"] for f in entry["findings"] if f["rule"] == "PA-T06"]
    assert lines == list(range(6, 22))  # each at its own targetRefs item


# --- every output format, parsed back --------------------------------------------------------


def check_document(args: list[str]) -> dict[str, Any]:
    ran = run("check", *args)
    assert ran.code == 1, ran
    return dict(json.loads(ran.out) if "json" in args else yaml.safe_load(ran.out))


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_json_and_yaml_carry_a_versioned_envelope_and_full_counts(output: str) -> None:
    report = check_document(["-o", output, str(CLUSTER), str(BROKEN)])
    assert report["apiVersion"] == "cli.policy-attachment.dev/v1"
    assert report["kind"] == "CheckResult"
    summary = report["summary"]
    assert summary["checked"] == len(report["policies"])
    assert summary["checked"] == summary["denied"] + summary["warned"] + summary["clean"]
    assert summary["denied"] == sum(p["verdict"] == "denied" for p in report["policies"])
    findings = [f for p in report["policies"] for f in p["findings"]]
    assert summary["findings"]["deny"] == sum(f["action"] == "deny" for f in findings)
    assert summary["findings"]["warn"] == sum(f["action"] == "warn" for f in findings)


def test_yaml_and_json_are_the_same_document() -> None:
    paths = [str(CLUSTER), str(BROKEN)]
    as_json = json.loads(run("check", "-o", "json", *paths).out)
    as_yaml = yaml.safe_load(run("check", "-o", "yaml", *paths).out)
    assert as_json == as_yaml


def test_the_human_counts_line_matches_the_json_summary() -> None:
    paths = [str(CLUSTER), str(BROKEN)]
    summary = json.loads(run("check", "-o", "json", *paths).out)["summary"]
    last = run("check", *paths).out.splitlines()[-1]
    assert last == (
        f"{summary['checked']} policies checked: {summary['denied']} denied, "
        f"{summary['warned']} allowed with warnings, {summary['clean']} clean"
    )


def test_sarif_has_the_2_1_0_shape_with_file_and_line_of_each_finding() -> None:
    s01 = BROKEN / "s01-targetref-and-targetrefs.yaml"
    t06 = BROKEN / "t06-target-does-not-exist.yaml"
    ran = run("check", "-o", "sarif", "examples/cluster", f"examples/broken/{s01.name}",
              f"examples/broken/{t06.name}", cwd=EXAMPLES.parent)  # fmt: skip
    assert ran.code == 1, ran
    log = json.loads(ran.out)
    assert log["version"] == "2.1.0" and "sarif" in log["$schema"]
    (sarif_run,) = log["runs"]
    driver = sarif_run["tool"]["driver"]
    assert driver["name"] == "policy-webhook"
    rule_ids = [rule["id"] for rule in driver["rules"]]
    assert {"PA-S01", "PA-T06"} <= set(rule_ids)
    for result in sarif_run["results"]:
        assert result["level"] in ("error", "warning", "note")
        assert rule_ids[result["ruleIndex"]] == result["ruleId"]
        (location,) = result["locations"]
        physical = location["physicalLocation"]
        assert not physical["artifactLocation"]["uri"].startswith("/")
        assert physical["region"]["startLine"] >= 1
    by_rule = {r["ruleId"]: r for r in sarif_run["results"] if "examples/broken" in str(r)}
    s01_at = by_rule["PA-S01"]["locations"][0]["physicalLocation"]
    assert s01_at["artifactLocation"]["uri"] == f"examples/broken/{s01.name}"
    assert s01_at["region"]["startLine"] == line_of(s01, "  targetRef:")
    assert by_rule["PA-S01"]["level"] == "error"
    t06_at = by_rule["PA-T06"]["locations"][0]["physicalLocation"]
    assert t06_at["region"]["startLine"] == line_of(t06, "- group:")
    assert by_rule["PA-T06"]["level"] == "warning"


def test_sarif_names_both_copies_of_a_duplicate(tmp_path: Path) -> None:
    for name in ("a.yaml", "b.yaml"):
        (tmp_path / name).write_text(GOOD_POLICY, encoding="utf-8")
    log = json.loads(run("check", "-o", "sarif", str(CLUSTER), str(tmp_path)).out)
    (duplicate,) = [r for r in log["runs"][0]["results"] if r["ruleId"] == "duplicate-object"]
    uris = {
        duplicate["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
        duplicate["relatedLocations"][0]["physicalLocation"]["artifactLocation"]["uri"],
    }
    assert {Path(u).name for u in uris} == {"a.yaml", "b.yaml"}


# --- exit codes, and no traceback ------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "stdin", "code", "message"),
    [
        (["check", str(CLUSTER)], None, 0, ""),
        (["check", str(CLUSTER), str(BROKEN)], None, 1, ""),
        (
            ["check", "--strict", str(CLUSTER), str(BROKEN / "t06-target-does-not-exist.yaml")],
            None,
            1,
            "",
        ),
        (["check", str(EXAMPLES / "nope")], None, 2, "no such file or directory"),
        (["check"], None, 2, "nothing to check"),
        (["check", "-", "-f", "-"], "", 2, "standard input can be read only once"),
        (["check", "-"], "kind: [unclosed\n", 2, "<stdin>:2: not valid YAML"),
        (  # two files joined without `---`: kubectl refuses the keys written twice too
            ["check", "-"],
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n"
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: b}\n",
            2,
            "<stdin>:4: not valid YAML: key 'apiVersion' is written twice in one mapping "
            "(first on line 1)",
        ),
        (["check", "-o", "xml", str(CLUSTER)], None, 2, "invalid choice"),
        (
            ["check", "--config", "/nonexistent/config.yaml", str(CLUSTER)],
            None,
            2,
            "cannot read config",
        ),
    ],
    ids=[
        "clean",
        "denied",
        "strict",
        "missing-path",
        "no-path",
        "stdin-twice",
        "bad-yaml",
        "key-twice",
        "bad-output",
        "missing-config",
    ],
)
def test_exit_codes_are_the_contract(
    args: list[str], stdin: str | None, code: int, message: str
) -> None:
    ran = run(*args, stdin=stdin)
    assert ran.code == code, ran
    assert message in ran.err, ran
    no_traceback(ran)


def test_a_file_that_is_not_text_is_a_read_error_naming_it(tmp_path: Path) -> None:
    binary = tmp_path / "image.yaml"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    ran = run("check", str(CLUSTER), str(binary))
    assert ran.code == 2, ran
    assert f"{binary}: cannot read" in ran.err, ran
    no_traceback(ran)


def test_a_closed_pipe_is_not_an_error() -> None:
    """`policy-webhook check … | head -1`: the reader went away; no complaint about it."""
    import subprocess

    from tests.fixtures.console import POLICY_WEBHOOK

    done = subprocess.run(
        f"'{POLICY_WEBHOOK}' check --all '{CLUSTER}' '{BROKEN}' | head -1",
        shell=True, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert len(done.stdout.splitlines()) == 1
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


def test_a_pipe_named_as_a_path_is_read_as_a_file(tmp_path: Path) -> None:
    """`policy-webhook check <(kubectl kustomize overlays/prod)`: the shell names a pipe."""
    import os
    import threading

    pipe = tmp_path / "manifests"
    os.mkfifo(pipe)
    text = (CLUSTER / "60-policies.yaml").read_text(encoding="utf-8")
    writer = threading.Thread(
        target=pipe.write_text, args=(text,), kwargs={"encoding": "utf-8"}, daemon=True
    )
    writer.start()
    ran = run("check", str(pipe))
    writer.join(timeout=10)
    assert ran.code == 1, ran  # read: the examples' cross-namespace policy is denied alone
    assert f"{pipe}:56: RetryPolicy/infra/storefront-retry-from-infra DENY [PA-T03]" in ran.out
