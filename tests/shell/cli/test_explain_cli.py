"""`policy-webhook explain` as a kubectl user meets it: the console script in a new process.

Its connection errors are one line and exit 2, never a traceback, and come within
`--request-timeout` + 1 s of a server that is down or silent; both spellings of a target
work; JSON and YAML are the whole result; and a policy kind explains what that policy reaches.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures.console import Ran, run
from tests.fixtures.paths import EXAMPLES

CLUSTER = EXAMPLES / "cluster"
MANIFESTS = ("--manifests", str(CLUSTER))


def explain(*args: str, env: dict[str, str] | None = None) -> Ran:
    return run("explain", *args, env=env, timeout=60)


def one_line_error(ran: Ran) -> str:
    """The error of a failed command: exit 2, one line on stderr, no traceback."""
    assert ran.code == 2, ran
    assert "Traceback" not in ran.err, ran
    lines = ran.err.strip().splitlines()
    assert len(lines) == 1, ran
    assert lines[0].startswith("policy-webhook: error: "), ran
    return lines[0]


# --- connection failures ------------------------------------------------------------------------


def kubeconfig(tmp_path: Path, server: str, **extra: Any) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "here",
        "clusters": [
            {"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}
        ],
        "users": [{"name": "u", "user": {"token": "not-a-real-token"}}],
        "contexts": [
            {"name": "here", "context": {"cluster": "c", "user": "u", "namespace": "apps"}}
        ],
        **extra,
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens there once the socket is closed


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A server that accepts connections and never says a word (a hung API server)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(sock.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    sock.close()


def test_a_missing_kubeconfig_is_one_line_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.kubeconfig"
    line = one_line_error(explain("HTTPRoute/x", env={"KUBECONFIG": str(missing)}))
    assert str(missing) in line and "--manifests" in line


def test_without_kubeconfig_or_home_config_it_says_so(tmp_path: Path) -> None:
    line = one_line_error(explain("HTTPRoute/x", env={"HOME": str(tmp_path)}))
    assert "~/.kube/config" in line


@pytest.mark.parametrize(
    ("extra", "args", "expected"),
    [
        ({}, ["--context", "elsewhere"], "context 'elsewhere' is not in"),
        ({"current-context": ""}, [], "sets no current context: pass --context (it has: here)"),
    ],
    ids=["unknown-context", "no-current-context"],
)
def test_a_context_that_is_not_there_is_one_line(
    tmp_path: Path, extra: dict[str, Any], args: list[str], expected: str
) -> None:
    config = kubeconfig(tmp_path, f"https://127.0.0.1:{closed_port()}", **extra)
    line = one_line_error(explain("HTTPRoute/x", "--kubeconfig", str(config), *args))
    assert expected in line


def test_a_kubeconfig_that_is_not_yaml_is_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("clusters: [unclosed\n", encoding="utf-8")
    line = one_line_error(explain("HTTPRoute/x", "--kubeconfig", str(broken)))
    assert "cannot read kubeconfig" in line


def test_a_refused_connection_is_one_line_at_once(tmp_path: Path) -> None:
    server = f"https://127.0.0.1:{closed_port()}"
    ran = explain("HTTPRoute/x", "--kubeconfig", str(kubeconfig(tmp_path, server)))
    line = one_line_error(ran)
    assert f"cannot reach the API server at {server}" in line
    assert ran.seconds < 1 + 1, ran  # no retries: well within the default 30 s + 1 s


@pytest.mark.parametrize("timeout", ["1s", "2"])
def test_a_silent_server_is_answered_within_the_request_timeout_and_a_second(
    tmp_path: Path, silent_server: str, timeout: str
) -> None:
    config = kubeconfig(tmp_path, silent_server)
    ran = explain("HTTPRoute/x", "--kubeconfig", str(config), "--request-timeout", timeout)
    line = one_line_error(ran)
    seconds = float(timeout.rstrip("s"))
    assert f"did not answer within {seconds:g}s (--request-timeout)" in line
    assert seconds <= ran.seconds < seconds + 1, ran


def test_a_request_timeout_that_is_not_a_duration_is_a_usage_error() -> None:
    ran = explain("HTTPRoute/x", "--request-timeout", "soon")
    assert ran.code == 2 and "is not a duration" in ran.err and "Traceback" not in ran.err


# --- targets and formats ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spelling",
    [["HTTPRoute/storefront"], ["HTTPRoute", "storefront"], ["httproutes", "storefront"],
     ["httproute.gateway.networking.k8s.io/storefront"]],
    ids=["slash", "two-words", "plural", "qualified"],
)  # fmt: skip
def test_kind_name_and_kind_slash_name_say_the_same(spelling: list[str]) -> None:
    reference = explain("HTTPRoute/storefront", "-n", "apps", *MANIFESTS)
    ran = explain(*spelling, "-n", "apps", *MANIFESTS)
    assert ran.code == 0, ran
    assert ran.out == reference.out


def test_an_object_in_another_namespace_is_hinted() -> None:
    line = one_line_error(explain("HTTPRoute/storefront", *MANIFESTS))
    assert line.endswith(
        "HTTPRoute/default/storefront not found; HTTPRoute 'storefront' exists in namespace apps"
        " (use -n apps)"
    )


def test_a_policy_in_another_namespace_is_hinted() -> None:
    line = one_line_error(explain("RetryPolicy/gw-retry", "-n", "apps", *MANIFESTS))
    assert "exists in namespace infra (use -n infra)" in line


@pytest.mark.parametrize(
    ("target", "message"),
    [("bogus/foo", "cannot explain 'bogus'"), ("storefront", "expected KIND/NAME or KIND NAME"),
     ("a/b/c", "expected KIND/NAME")],
)  # fmt: skip
def test_bad_targets_are_one_line(target: str, message: str) -> None:
    assert message in one_line_error(explain(target, "-n", "apps", *MANIFESTS))


@pytest.mark.parametrize("target", ["HTTPRoute/storefront", "RetryPolicy/gw-retry"])
def test_yaml_and_json_are_the_same_document(target: str) -> None:
    namespace = "apps" if target.startswith("HTTPRoute") else "infra"
    as_json = json.loads(explain(target, "-n", namespace, "-o", "json", *MANIFESTS).out)
    as_yaml = yaml.safe_load(explain(target, "-n", namespace, "-o", "yaml", *MANIFESTS).out)
    assert as_json == as_yaml
    assert as_json["apiVersion"] == "cli.policy-attachment.dev/v1"


def test_an_object_document_is_never_truncated() -> None:
    """The annotation is capped (here at 512 bytes); the explanation never is."""
    ran = explain(
        "svc/foo", "-n", "apps", "-o", "json", "--annotation-max-bytes", "512", *MANIFESTS
    )
    document = json.loads(ran.out)
    assert len(ran.out) > 512 and "truncated" not in document
    for entry in document["policies"].values():
        for context in entry["contexts"]:
            assert set(context) == {"paths", "effective", "sources", "losers"}


# --- explain from a policy --------------------------------------------------------------------------


def test_a_policy_lists_where_it_wins_and_where_it_loses_to_whom() -> None:
    ran = explain("RetryPolicy/gw-retry", "-n", "infra", *MANIFESTS)
    assert ran.code == 0, ran
    assert ran.out.startswith(
        "RetryPolicy.policies.example.com infra/gw-retry  (Inherited, patch)\n"
    )
    assert "  attached at Gateway/infra/gw\n" in ran.out
    storefront = ran.out.split("  HTTPRoute/apps/storefront\n", 1)[1].split("\n\n", 1)[0]
    assert "wins   maxRetries = 3  (override at Gateway/infra/gw)" in storefront
    assert (
        "loses  retryOn (default at Gateway/infra/gw) — apps/storefront-retry is more specific"
        in storefront
    )


def policy_document(target: str, namespace: str, *extra: str) -> dict[str, Any]:
    ran = explain(target, "-n", namespace, "-o", "json", *MANIFESTS, *extra)
    assert ran.code == 0, ran
    document: dict[str, Any] = json.loads(ran.out)
    return document


def test_a_policy_document_names_every_object_context_and_winner() -> None:
    document = policy_document("RetryPolicy/gw-retry", "infra")
    assert document["kind"] == "PolicyExplanation"
    assert document["policy"]["ref"] == "infra/gw-retry"
    assert document["attachedAt"] == [{"ref": "Gateway/infra/gw", "exists": True}]
    objects = {entry["ref"]: entry for entry in document["objects"]}
    assert "Gateway/infra/gw" in objects and "HTTPRoute/apps/storefront" in objects
    summary = document["summary"]
    assert summary["objects"] == len(objects)
    assert summary["contexts"] == sum(
        len(c["paths"]) for entry in document["objects"] for c in entry["contexts"]
    )
    (context,) = objects["HTTPRoute/apps/storefront"]["contexts"]
    (loss,) = context["losses"]
    assert loss["field"] == "retryOn"
    assert loss["to"] == {
        "policy": "apps/storefront-retry",
        "stanza": "default",
        "at": "HTTPRoute/apps/storefront",
    }


def test_a_direct_policy_that_conflicts_loses_whole_to_the_older_one() -> None:
    document = policy_document("HealthCheckPolicy/foo-health-2", "apps")
    (entry,) = document["objects"]
    (context,) = entry["contexts"]
    assert context["wins"] == []
    (loss,) = context["losses"]
    assert loss["field"] == "*" and loss["to"]["policy"] == "apps/foo-health"
    assert "conflicted" in loss["reason"]


def test_a_policy_whose_target_is_missing_reaches_nothing_and_says_why() -> None:
    extra = ("--manifests", str(EXAMPLES / "broken" / "t06-target-does-not-exist.yaml"))
    ran = explain("RetryPolicy/retry-missing-route", "-n", "apps", *MANIFESTS, *extra)
    assert ran.code == 0, ran
    assert "attached at HTTPRoute/apps/does-not-exist  (does not exist)" in ran.out
    assert "reaches no object" in ran.out
