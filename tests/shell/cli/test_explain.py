"""`policy-webhook explain` on the bundled examples: one screen that says why, and a JSON
form that says, context by context, what the annotation says — and what it leaves out."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fixtures.paths import EXAMPLES
from webhook.core.admission import mutation
from webhook.core.annotation import spellings, summary
from webhook.core.model import kinds
from webhook.core.model.refs import ObjectKey
from webhook.core.model.settings import Settings
from webhook.shell.cli.main import main
from webhook.shell.cli.manifests import load_store

EXAMPLE_CLUSTER = EXAMPLES / "cluster"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["explain", *args, "--manifests", str(EXAMPLE_CLUSTER)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_explain_names_each_value_its_source_and_who_lost(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "HTTPRoute/storefront", "-n", "apps")
    assert code == 0
    assert out.startswith("HTTPRoute/apps/storefront\n")
    assert "maxRetries            = 3        from override infra/gw-retry" in out
    assert 'retryOn               = ["504"]  from default  apps/storefront-retry' in out
    assert (
        "lost: apps/storefront-retry default maxRetries at HTTPRoute/apps/storefront — overridden by infra/gw-retry"
        in out
    )


def test_explain_shows_direct_conflicts_and_sections(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "svc/foo", "-n", "apps")
    assert code == 0
    assert (
        "lost: apps/foo-health-2 direct * at Service/apps/foo — conflicted: apps/foo-health wins (older)"
        in out
    )
    assert "via Service/apps/foo#https" in out


def per_path(kinds_entry: dict[str, Any]) -> dict[tuple[str, tuple[str, ...]], Any]:
    """(kind, path) → the context's effective value and sources, however contexts are grouped."""
    return {
        (kind, tuple(path)): (context["effective"], context.get("sources"))
        for kind, entry in kinds_entry.items()
        for context in entry["contexts"]
        for path in context["paths"]
    }


def test_explain_json_is_the_whole_result_the_annotation_abbreviates(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(
        capsys, "httproutes/storefront", "-n", "apps", "-o", "json", "--annotation-max-bytes", "512"
    )
    assert code == 0
    document = json.loads(out)
    assert (document["apiVersion"], document["kind"]) == (
        "cli.policy-attachment.dev/v1",
        "Explanation",
    )
    assert document["object"]["ref"] == "HTTPRoute/apps/storefront"
    store, _ = load_store([str(EXAMPLE_CLUSTER)])
    key = ObjectKey("gateway.networking.k8s.io", "HTTPRoute", "apps", "storefront")
    value = json.loads(summary.summarize(key, store, Settings()) or "null")
    assert per_path(document["policies"]) == per_path(value["policies"])
    # Never truncated (the 512-byte cap is the annotation's), and the losers are there.
    retry = document["policies"]["RetryPolicy.policies.example.com"]
    (losers,) = {json.dumps(c["losers"]) for c in retry["contexts"]}
    assert {(x["policy"], x["field"]) for x in json.loads(losers)} == {
        ("apps/storefront-retry", "maxRetries"),
        ("infra/gw-retry", "retryOn"),
    }
    assert retry["class"] == "Inherited" and retry["merge"] == "patch"


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("bogus/foo", "cannot explain 'bogus'"),
        ("HTTPRoute/nope", "HTTPRoute/apps/nope not found"),
        ("storefront", "expected KIND/NAME"),
    ],
)
def test_explain_bad_targets_are_usage_errors(
    capsys: pytest.CaptureFixture[str], target: str, message: str
) -> None:
    code, _, err = run(capsys, target, "-n", "apps")
    assert code == 2
    assert message in err


def mutate_review(obj: dict[str, Any], key: ObjectKey) -> Any:
    return {
        "uid": "u",
        "kind": {"group": key.group, "version": "v1", "kind": key.kind},
        "resource": {"group": key.group, "version": "v1", "resource": "x"},
        "operation": "UPDATE",
        "object": obj,
        "oldObject": obj,
    }


def test_the_annotation_of_every_example_object_matches_explain(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What /mutate writes on each annotatable example object is what `explain -o json` says
    of it, context by context."""
    store, where = load_store([str(EXAMPLE_CLUSTER)])
    settings = Settings()
    checked = 0
    for key in sorted(where):
        if key.group_kind not in kinds.ANNOTATED_KINDS:
            continue
        ops = mutation.mutate(
            mutate_review(dict(where[key].obj), key), view=store, settings=settings
        )
        written = next((op.get("value") for op in ops if op["op"] in ("add", "replace")), None)
        if isinstance(written, dict):  # the annotations map was created whole
            written = written[settings.annotation_key]
        code, out, _ = run(
            capsys, f"{key.kind}/{key.name}", "-n", key.namespace or "default", "-o", "json"
        )
        assert code == 0
        annotated = json.loads(written)["policies"] if written else {}
        assert per_path(json.loads(out)["policies"]) == per_path(annotated), key
        checked += 1
    assert checked >= 10


@pytest.mark.parametrize(
    ("words", "namespace", "expected"),
    [
        (["gatewayclass/acme"], "apps", ObjectKey("gateway.networking.k8s.io", "GatewayClass", "", "acme")),
        (["gw", "gw"], "infra", ObjectKey("gateway.networking.k8s.io", "Gateway", "infra", "gw")),
        (["services/foo"], "apps", ObjectKey("", "Service", "apps", "foo")),
        (["services.core/foo"], "apps", ObjectKey("", "Service", "apps", "foo")),  # SPEC §1.4: `core` is ""
        (["grpcroutes.gateway.networking.k8s.io/grpc"], "apps", ObjectKey("gateway.networking.k8s.io", "GRPCRoute", "apps", "grpc")),
        (["RetryPolicy", "gw-retry"], "infra", ObjectKey("policies.example.com", "RetryPolicy", "infra", "gw-retry")),
        (["retrypolicies.policies.example.com/gw-retry"], "infra", ObjectKey("policies.example.com", "RetryPolicy", "infra", "gw-retry")),
        (["connectionlimitpolicy/acme-limits"], "apps", ObjectKey("policies.example.com", "ConnectionLimitPolicy", "", "acme-limits")),
    ],
)  # fmt: skip
def test_kinds_are_read_as_kubectl_reads_them(
    words: list[str], namespace: str, expected: ObjectKey
) -> None:
    store, _ = load_store([str(EXAMPLE_CLUSTER)])
    named = spellings.resolve(words, store)
    assert spellings.object_key(named, namespace, store) == expected
    assert named.is_policy == expected.kind.endswith("Policy")


def test_a_kind_in_two_groups_asks_for_the_group() -> None:
    store, _ = load_store([str(EXAMPLE_CLUSTER)])
    other = {
        "apiVersion": "other.example.net/v1",
        "kind": "RetryPolicy",
        "metadata": {"name": "x", "namespace": "apps"},
        "spec": {"targetRef": {"group": "", "kind": "Service", "name": "foo"}},
    }
    store.upsert(other)
    with pytest.raises(spellings.SpellingError, match="add the group"):
        spellings.resolve(["retrypolicy/x"], store)
    named = spellings.resolve(["RetryPolicy.other.example.net/x"], store)
    assert named.group_kind.group == "other.example.net"
