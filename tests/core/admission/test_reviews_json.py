"""The review codec reads and writes with orjson, and gives exactly what json gave before it.

Reference for decoding: `json.loads(body, parse_constant=refuse)`, errors included. Reference for
encoding: compact `json.dumps(..., ensure_ascii=False)` encoded as UTF-8, or with `ensure_ascii`
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


def json_decoded(body: bytes) -> object:
    """What the webhook read before orjson: a value, or the message of a 400."""
    try:
        return json.loads(body, parse_constant=_refuse)
    except (UnicodeDecodeError, ValueError) as exc:
        return reviews.MalformedReview(f"body is not JSON: {exc}")
    except RecursionError:
        return reviews.MalformedReview("body is not JSON we can read: nested too deeply")


def decoded(body: bytes) -> object:
    try:
        return reviews._loads(body)
    except reviews.MalformedReview as exc:
        return exc


def same(a: object, b: object) -> bool:
    """Equal, and of the same types all the way down (1 == 1.0 == True in Python)."""
    if isinstance(a, Exception) or isinstance(b, Exception):
        return type(a) is type(b) and str(a) == str(b)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


# Every code point, lone surrogates (category Cs) and controls included.
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=12)
# What a response is made of: no floats (none of our responses has one; orjson spells some
# floats differently, `1e16` for json's `1e+16`).
RESPONSE_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
    max_leaves=20,
)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | ANY_TEXT,
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


# --- decoding ---------------------------------------------------------------------------------


@BUDGET
@given(JSON_VALUES, st.booleans(), st.booleans())
def test_any_json_text_decodes_to_the_value_json_reads(
    value: Any, ensure_ascii: bool, spaced: bool
) -> None:
    separators = (", ", ": ") if spaced else (",", ":")
    text = json.dumps(value, ensure_ascii=ensure_ascii, separators=separators)
    body = text.encode("utf-8", "surrogatepass")
    assert same(decoded(body), json_decoded(body))


@BUDGET
@given(st.binary(max_size=64))
def test_any_bytes_decode_to_what_json_reads_or_to_its_error(body: bytes) -> None:
    assert same(decoded(body), json_decoded(body))


@pytest.mark.parametrize(
    "body",
    [
        b'{"a":1,"a":2}',  # duplicate keys: the last one wins in both
        b'"\\ud800"',  # a lone surrogate escape: orjson refuses, json reads it
        b'["\\udc00\\ud800"]',  # reversed pair
        b'"\xed\xa0\x80"',  # a surrogate in UTF-8 bytes (json reads it, "surrogatepass")
        b"\xef\xbb\xbf{}",  # a UTF-8 byte order mark
        '{"a": "é"}'.encode("utf-16"),  # UTF-16 with its BOM: json detects it
        '{"a": "é"}'.encode("utf-32-le"),  # UTF-32 without one
        b"18446744073709551615",  # 2**64 - 1: an int in both
        b"18446744073709551616",  # 2**64: orjson would say 1.8446744073709552e+19
        b"-9223372036854775809",  # -2**63 - 1: the same on the negative side
        b'{"spec":{"maxRetries":123456789012345678901234567890}}',
        b"[1e400, -1e400]",  # past a double: json says inf
        b"[1e-400, -0.0, -0, 5e-324, 0.1, 1E+2]",
        b"[NaN]",
        b"[Infinity]",
        b"[-Infinity]",
        b'"\xff"',  # not UTF-8
        b'{"a":' * 300 + b"1" + b"}" * 300,  # deep, and both read it
        b"[" * 1010 + b"]" * 1010,  # deeper than json reads: orjson would read it
        b"[" * 1100 + b"]" * 1100,  # deeper than orjson reads
        b"[" * 100_000,  # deeper than json reads: malformed, not a crash
        b'{"a":1} x',
        b"",
        b" \n\t{}\r\n",
    ],
)
def test_corners_where_orjson_and_json_differ_are_read_as_json_reads_them(body: bytes) -> None:
    assert same(decoded(body), json_decoded(body))


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
