"""The review codec reads and writes with orjson, and gives exactly what json gave before it.

Reading JSON is `json_read`'s (its tests: tests/core/model/test_json_read.py); here, that a body
it cannot read is a 400 with json's message. Reference for encoding: compact `json.dumps(..., ensure_ascii=False)` encoded as UTF-8, or with `ensure_ascii`
when a lone surrogate makes UTF-8 impossible. Both references are written out here, so that a
change of library is a change these tests see byte for byte.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fixtures.budget import examples
from webhook.core.admission import reviews
from webhook.core.rules.findings import Finding, Judge, Verdict

BUDGET = settings(
    max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def json_encoded(value: object) -> bytes:
    """What the webhook sent before orjson."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":")).encode()


def _refuse(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON (RFC 8259 has no NaN or Infinity)")


def malformed_message(body: bytes) -> str:
    """The message of the MalformedReview a body raises."""
    with pytest.raises(reviews.MalformedReview) as raised:
        reviews.decode_review(body)
    return str(raised.value)


# Every code point, lone surrogates (category Cs) and controls included.
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=12)
# What a response is made of: no floats (none of our responses has one; orjson spells some
# floats differently, `1e16` for json's `1e+16`).
RESPONSE_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
    max_leaves=20,
)
# --- encoding ---------------------------------------------------------------------------------


@BUDGET
@given(st.dictionaries(ANY_TEXT, RESPONSE_VALUES, max_size=6))  # a response is an object
def test_a_response_is_encoded_byte_for_byte_as_json_encoded_it(value: Any) -> None:
    expected = json_encoded(
        {"apiVersion": reviews.API_VERSION, "kind": reviews.KIND, "response": value}
    )
    assert reviews.encode_review(value) == expected


@pytest.mark.parametrize(
    "text",
    [
        "plain",
        "café — 東京 😀",  # non-ASCII stays UTF-8, unescaped
        'quote " backslash \\ slash /',
        "".join(map(chr, range(0x20))) + "\x7f\u2028\u2029",  # controls; DEL and U+2028 raw
        "\ud800",  # a lone high surrogate: only an escape can carry it
        "a\udfffb",  # a lone low one between letters
        "\ud83d\ude00",  # a surrogate pair left unpaired in the str: two escapes
    ],
    ids=["ascii", "non-ascii", "quotes", "controls", "high-surrogate", "low-surrogate", "pair"],
)
def test_uids_warnings_and_audit_values_are_written_as_json_wrote_them(text: str) -> None:
    response = reviews.allowed(text, warnings=[text, "[PA-C04] x"], audit={text: text})
    assert reviews.encode_review(response) == json_encoded(
        {"apiVersion": reviews.API_VERSION, "kind": reviews.KIND, "response": response}
    )


def test_a_lone_surrogate_is_escaped_and_the_rest_of_the_answer_stays_utf8_json() -> None:
    encoded = reviews.encode_review(reviews.allowed("uid-\ud800", warnings=["déjà"]))
    assert b'"uid-\\ud800"' in encoded
    assert json.loads(encoded)["response"]["uid"] == "uid-\ud800"


def test_what_orjson_refuses_is_written_by_json() -> None:
    # An int over 64 bits and a non-str key: orjson raises, json writes them.
    value = {"big": 2**64, "small": -(2**63) - 1, "keys": {1: "one", None: "none"}}
    assert reviews.encode_review(value) == json_encoded(  # type: ignore[arg-type]
        {"apiVersion": reviews.API_VERSION, "kind": reviews.KIND, "response": value}
    )


@pytest.mark.parametrize("name", ["retry", "\ud800", "日本"])
def test_a_denial_is_encoded_as_json_encoded_it(name: str) -> None:
    judge = Judge(kind_actions={}, global_actions={})
    found = [Finding("PA-S01", "spec.default", "bad"), Finding("PA-C04", "", "changes things")]
    verdict = Verdict(tuple(map(judge, found)))
    request: reviews.Request = {
        "uid": "u1",
        "kind": {"group": "policies.example.com", "version": "v1", "kind": "RetryPolicy"},
        "resource": {"group": "policies.example.com", "version": "v1", "resource": "retries"},
        "operation": "CREATE",
        "object": {"metadata": {"name": name}},
    }
    response = reviews.from_verdict("u1", verdict, request=request)
    assert response["allowed"] is False
    assert reviews.encode_review(response) == json_encoded(
        {"apiVersion": reviews.API_VERSION, "kind": reviews.KIND, "response": response}
    )


@pytest.mark.parametrize("value", ['{"a":"b"}', "\ud800 lone", "ünïcode"])
def test_a_patch_is_the_base64_of_the_bytes_json_wrote(value: str) -> None:
    operations = [{"op": "add", "path": "/metadata/annotations/a~1b", "value": value}]
    response = reviews.patched("u1", operations)
    assert base64.b64decode(response["patch"]) == json_encoded(operations)


# --- decoding (what JSON reads as is `json_read`'s, tests/core/model/test_json_read.py) ---------


@pytest.mark.parametrize(
    "body",
    [b'{"a":1} x', b"[NaN]", b'"\xff"', b"", '{"a": "\u00e9"}'.encode("utf-16")[:-1]],
    ids=["trailing-data", "nan", "not-utf8", "empty", "cut-utf16"],
)
def test_a_body_json_cannot_read_is_malformed_with_jsons_own_message(body: bytes) -> None:
    with pytest.raises((UnicodeDecodeError, ValueError)) as raised:
        json.loads(body, parse_constant=_refuse)
    assert malformed_message(body) == f"body is not JSON: {raised.value}"


def test_a_body_nested_deeper_than_json_reads_is_malformed_not_a_crash() -> None:
    expected = "body is not JSON we can read: nested too deeply"
    assert malformed_message(b"[" * 100_000) == expected


def test_a_review_with_a_huge_integer_keeps_it_exact() -> None:
    body = json.dumps(
        {
            "apiVersion": reviews.API_VERSION,
            "kind": reviews.KIND,
            "request": {
                "uid": "u",
                "operation": "CREATE",
                "kind": {"group": "g", "version": "v1", "kind": "K"},
                "object": {"spec": {"maxRetries": 2**64}},
            },
        }
    ).encode()
    request = reviews.decode_review(body)
    assert request["object"] is not None
    assert request["object"]["spec"]["maxRetries"] == 2**64
    assert type(request["object"]["spec"]["maxRetries"]) is int
