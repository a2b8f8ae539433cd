"""`POST /validate` and `POST /mutate` over real HTTPS, as the API server calls them."""

from __future__ import annotations

import base64
import copy
import gc
import http.client
import json
import logging
from collections.abc import Callable
from typing import Any, NoReturn

import pytest

from tests.fixtures.https import RunningWebhook, policy, review_of
from webhook.core.admission import mutation, reviews
from webhook.core.admission import validation as admission
from webhook.core.annotation.cache import SummaryCache
from webhook.core.model.refs import ObjectKey
from webhook.core.model.settings import Settings
from webhook.core.state.store import ClusterView, Store
from webhook.shell.https import endpoints
from webhook.shell.process.logs import JsonFormatter

RETRY_ON_ROUTE = """
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {name: r-retry, namespace: apps}
spec:
  targetRefs:
  - {group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}
  default:
    maxRetries: 3
"""

BROKEN_TARGETS = """
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {name: broken, namespace: apps}
spec:
  targetRef: {group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}
  targetRefs:
  - {group: gateway.networking.k8s.io/v1, kind: HTTPRoute, name: r}
  default:
    maxRetries: 3
"""

MISSING_ROUTE = """
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {name: early, namespace: apps}
spec:
  targetRefs:
  - {group: gateway.networking.k8s.io, kind: HTTPRoute, name: not-applied-yet}
  default:
    maxRetries: 2
"""


def obj(text: str) -> dict[str, Any]:
    return policy(text)


# --- /validate ---------------------------------------------------------------------------------


def test_a_valid_policy_is_allowed_and_the_envelope_is_echoed(webhook: RunningWebhook) -> None:
    review = review_of(obj(RETRY_ON_ROUTE))
    reply = webhook.post_review("/validate", review)
    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith("application/json")
    body = reply.json()
    assert body["apiVersion"] == "admission.k8s.io/v1"
    assert body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == review["request"]["uid"]
    assert body["response"]["allowed"] is True
    # Valid and unopposed: the only thing to say is what it changes (the impact preview).
    assert body["response"]["warnings"] == [
        "[PA-C04] changes maxRetries on 1 HTTPRoute (apps/r unset→3)"
    ]


def test_a_broken_policy_is_denied_as_422_invalid_with_one_cause_per_violation(
    webhook: RunningWebhook,
) -> None:
    review = review_of(obj(BROKEN_TARGETS))
    reply = webhook.post_review("/validate", review)
    assert reply.status == 200  # a bad object is the user's problem, told in response.status
    response = reply.json()["response"]
    assert response["uid"] == review["request"]["uid"]
    assert response["allowed"] is False
    status = response["status"]
    assert status["code"] == 422
    assert status["reason"] == "Invalid"
    causes = status["details"]["causes"]
    assert len(causes) >= 2  # PA-S01 and PA-S04 at least: every violation, not the first
    for cause in causes:
        assert cause["message"].startswith("[PA-")
        assert cause["field"].startswith("spec.")
        assert cause["type"].startswith("FieldValue")
    rule_ids = {cause["message"][1:7] for cause in causes}
    assert {"PA-S01", "PA-S04"} <= rule_ids


def test_a_policy_the_rules_cannot_read_is_denied_not_a_500(webhook: RunningWebhook) -> None:
    unreadable = obj(RETRY_ON_ROUTE) | {"spec": "maxRetries=3"}
    reply = webhook.post_review("/validate", review_of(unreadable))
    assert reply.status == 200
    assert reply.json()["response"]["allowed"] is False


def test_a_policy_on_a_missing_route_is_allowed_with_a_pa_t06_warning(
    webhook: RunningWebhook,
) -> None:
    reply = webhook.post_review("/validate", review_of(obj(MISSING_ROUTE)))
    response = reply.json()["response"]
    assert response["allowed"] is True
    warnings = response["warnings"]
    assert len(warnings) == 1
    assert warnings[0].startswith("[PA-T06]")
    assert "\n" not in warnings[0]


def test_warnings_are_capped_at_ten_lines_and_the_last_says_how_many_were_left_out(
    webhook: RunningWebhook,
) -> None:
    many = obj(MISSING_ROUTE)
    many["spec"]["targetRefs"] = [
        {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": f"missing-{i}"}
        for i in range(14)
    ]
    response = webhook.post_review("/validate", review_of(many)).json()["response"]
    warnings = response["warnings"]
    assert len(warnings) == 10
    assert all(line.startswith("[PA-T06]") for line in warnings[:9])
    assert "5 more" in warnings[-1]
    assert all("\n" not in line for line in warnings)


def test_delete_of_a_policy_is_allowed(webhook: RunningWebhook) -> None:
    review = review_of(None, operation="DELETE", old=obj(RETRY_ON_ROUTE))
    response = webhook.post_review("/validate", review).json()["response"]
    assert response == response | {"uid": review["request"]["uid"], "allowed": True}


def test_content_type_is_not_checked(webhook: RunningWebhook) -> None:
    review = review_of(obj(RETRY_ON_ROUTE))
    reply = webhook.request(
        "POST", "/validate", json.dumps(review).encode(), {"Content-Type": "text/plain"}
    )
    assert reply.status == 200


# --- /mutate -----------------------------------------------------------------------------------


def test_mutate_answers_allowed_with_at_most_a_json_patch(
    webhook: RunningWebhook, cluster: Store
) -> None:
    route = dict(
        cluster.get(ObjectKey("gateway.networking.k8s.io", "HTTPRoute", "apps", "r")) or {}
    )
    review = review_of(route, operation="UPDATE", old=route)
    response = webhook.post_review("/mutate", review).json()["response"]
    assert response["uid"] == review["request"]["uid"]
    assert response["allowed"] is True
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        assert isinstance(json.loads(base64.b64decode(response["patch"])), list)


def test_mutate_answers_our_own_echo_from_the_cache_with_the_same_patch(
    start_webhook: Callable[..., RunningWebhook], webhook: RunningWebhook, cluster: Store
) -> None:
    """An UPDATE that changes only annotations (the reconciler's patch coming back) is
    answered from the summary cache: the same patch as computing it, no second computation."""
    stored = cluster.get(ObjectKey("gateway.networking.k8s.io", "HTTPRoute", "apps", "r")) or {}
    echo = copy.deepcopy(dict(stored))
    echo["metadata"]["annotations"] = {Settings().annotation_key: "an older value"}
    cache = SummaryCache(cluster, Settings())

    def patch_from(hook: RunningWebhook) -> Any:
        response = hook.post_review("/mutate", review_of(echo, operation="UPDATE", old=echo))
        return json.loads(base64.b64decode(response.json()["response"]["patch"]))

    with start_webhook(cache=cache) as cached:
        assert patch_from(cached) == patch_from(cached) == patch_from(webhook)
    assert (cache.misses, cache.hits) == (1, 1)


def test_mutate_sends_the_cores_operations_base64_encoded(
    webhook: RunningWebhook, monkeypatch: pytest.MonkeyPatch
) -> None:
    ops = [{"op": "add", "path": "/metadata/annotations/x", "value": "y"}]
    monkeypatch.setattr(mutation, "mutate", lambda request, *, view, settings, cache: ops)
    response = webhook.post_review("/mutate", review_of(obj(RETRY_ON_ROUTE))).json()["response"]
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == ops


def test_a_review_is_decoded_with_the_collector_held(
    webhook: RunningWebhook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decoding builds a tree of new containers and no cycle: no collection walks it meanwhile
    (`heap.held`), and the collector is back on for everything after."""
    seen: list[bool] = []
    decode = reviews.decode_review

    def watched(body: bytes) -> reviews.Request:
        seen.append(gc.isenabled())
        return decode(body)

    monkeypatch.setattr(reviews, "decode_review", watched)
    response = webhook.post_review("/validate", review_of(obj(RETRY_ON_ROUTE))).json()["response"]
    assert response["allowed"] is True
    assert seen == [False]
    assert gc.isenabled()


# --- broken webhook calls: HTTP errors, so failurePolicy decides --------------------------------


def envelope(api_version: str, **request: Any) -> bytes:
    request.setdefault("kind", {"group": "", "version": "v1", "kind": "ConfigMap"})
    request.setdefault("operation", "CREATE")
    return json.dumps(
        {"apiVersion": api_version, "kind": "AdmissionReview", "request": request}
    ).encode()


@pytest.mark.parametrize(
    ("body", "why"),
    [
        pytest.param(b"{not json", "not JSON", id="not-json"),
        pytest.param(b"", "not JSON", id="empty"),
        pytest.param(envelope("admission.k8s.io/v1"), "uid", id="no-uid"),
        pytest.param(
            envelope("admission.k8s.io/v1beta1", uid="u"), "admission.k8s.io/v1beta1", id="v1beta1"
        ),
    ],
)
@pytest.mark.parametrize("path", ["/validate", "/mutate"])
def test_a_malformed_review_is_http_400_with_a_short_explanation(
    webhook: RunningWebhook, path: str, body: bytes, why: str
) -> None:
    reply = webhook.request("POST", path, body, {"Content-Type": "application/json"})
    assert reply.status == 400
    status = reply.json()
    assert status["kind"] == "Status"
    assert status["code"] == 400
    assert why in status["message"]
    assert len(status["message"]) < 300


def test_a_body_over_7_mib_is_http_413(webhook: RunningWebhook) -> None:
    review = review_of(obj(RETRY_ON_ROUTE))
    review["request"]["object"]["metadata"]["annotations"] = {"big": "x" * endpoints.MAX_BODY_BYTES}
    reply = webhook.post_review("/validate", review)
    assert reply.status == 413
    assert reply.json()["reason"] == "RequestEntityTooLarge"


def test_a_chunked_body_over_7_mib_is_http_413(webhook: RunningWebhook) -> None:
    chunk = b" " * (1024 * 1024)
    chunks = iter([b"{"] + [chunk] * 8 + [b"}"])
    conn = webhook_connection(webhook)
    try:
        conn.request("POST", "/validate", body=chunks, encode_chunked=True)
        assert conn.getresponse().status == 413
    finally:
        conn.close()


def test_a_body_just_under_the_cap_is_read(webhook: RunningWebhook) -> None:
    review = review_of(obj(RETRY_ON_ROUTE))
    review["request"]["object"]["metadata"]["annotations"] = {"big": ""}
    padding = endpoints.MAX_BODY_BYTES - len(json.dumps(review).encode())
    review["request"]["object"]["metadata"]["annotations"]["big"] = "x" * padding
    body = json.dumps(review).encode()
    assert len(body) == endpoints.MAX_BODY_BYTES
    assert webhook.request("POST", "/validate", body).status == 200


def webhook_connection(webhook: RunningWebhook) -> http.client.HTTPSConnection:
    return http.client.HTTPSConnection(
        "127.0.0.1", webhook.port, context=webhook.client_context, timeout=30
    )


def test_an_exception_in_the_core_is_http_500_and_logged_with_the_uid(
    webhook: RunningWebhook, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(request: reviews.Request, *, view: ClusterView, settings: Settings) -> NoReturn:
        raise KeyError("a bug of ours")

    monkeypatch.setattr(admission, "validate", broken)
    caplog.set_level(logging.INFO)
    review = review_of(obj(RETRY_ON_ROUTE), uid="uid-of-the-failing-call")
    reply = webhook.post_review("/validate", review)
    assert reply.status == 500
    assert "uid-of-the-failing-call" in reply.json()["message"]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    line = json.loads(JsonFormatter().format(errors[0]))
    assert line["uid"] == "uid-of-the-failing-call"
    assert line["verdict"] == "error"
    assert "a bug of ours" in line["exc_info"]
