"""`json_read.loads` reads JSON exactly as `json.loads` reads it, errors included.

Reference: `json.loads(body, parse_constant=refuse)` (RFC 8259 has no NaN or Infinity). orjson
reads most bodies, and wherever it would answer otherwise — an integer over 64 bits, nesting
json cannot read, what it refuses and json accepts — json reads them; these tests hold the two
equal on any JSON text, on any bytes and on each of those corners, so that the library under
`loads` is a speed, never a difference a review or a watch event could see.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fixtures.budget import examples
from webhook.core.model import json_read

BUDGET = settings(
    max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _refuse(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON (RFC 8259 has no NaN or Infinity)")


def json_decoded(body: bytes) -> object:
    """What json reads: a value, or the exception it raises."""
    try:
        return json.loads(body, parse_constant=_refuse)
    except (ValueError, RecursionError) as exc:
        return exc


def decoded(body: bytes) -> object:
    try:
        return json_read.loads(body)
    except (ValueError, RecursionError) as exc:
        return exc


def same(a: object, b: object) -> bool:
    """Equal, and of the same types all the way down (1 == 1.0 == True in Python); errors of
    the same type with the same message."""
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
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
    max_leaves=20,
)


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


def test_nan_and_infinity_are_refused_though_json_alone_would_read_them() -> None:
    assert math.isnan(json.loads(b"[NaN]")[0])  # json alone reads a float
    with pytest.raises(ValueError, match="NaN is not JSON"):
        json_read.loads(b"[NaN]")


def test_a_watch_line_with_a_huge_integer_keeps_it_exact() -> None:
    line = b'{"type":"ADDED","object":{"spec":{"maxRetries":18446744073709551616}}}\n'
    event = json_read.loads(line)
    assert event["object"]["spec"]["maxRetries"] == 2**64
    assert type(event["object"]["spec"]["maxRetries"]) is int
