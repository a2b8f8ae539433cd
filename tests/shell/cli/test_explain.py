"""`policy-webhook explain` on the bundled examples: one screen that says why, and a JSON
form that is exactly the annotation the webhook writes on that object."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fixtures.paths import EXAMPLES
from webhook.core.admission import mutation
from webhook.core.annotation import explanation as explain
from webhook.core.annotation import summary
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


def test_explain_json_is_the_annotation_value(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "httproutes/storefront", "-n", "apps", "-o", "json")
    assert code == 0
    value = json.loads(out)
    store, _ = load_store([str(EXAMPLE_CLUSTER)])
    expected = summary.summarize(
        ObjectKey("gateway.networking.k8s.io", "HTTPRoute", "apps", "storefront"), store, Settings()
    )
    assert out.strip() == expected
    assert value["version"] == 1 and value["truncated"] is False


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
    """What /mutate writes on each annotatable example object equals `explain -o json` of it."""
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
        assert out.strip() == (written or "null"), key
        checked += 1
    assert checked >= 10


def test_parse_target_accepts_the_spellings_people_type() -> None:
    assert explain.parse_target("gatewayclass/acme", "apps") == ObjectKey(
        "gateway.networking.k8s.io", "GatewayClass", "", "acme"
    )
    assert explain.parse_target("gw/gw", "infra").kind == "Gateway"
    assert explain.parse_target("services/foo", "apps") == ObjectKey("", "Service", "apps", "foo")
    assert (
        explain.parse_target("grpcroutes.gateway.networking.k8s.io/grpc", "apps").kind
        == "GRPCRoute"
    )
