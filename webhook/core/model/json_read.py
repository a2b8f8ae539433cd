"""JSON read exactly as Python's `json` reads it, by orjson wherever the two agree.

Reading JSON is a fixed cost of every admission call (its review) and of every watch event (its
line). orjson reads both faster than `json` (docs/performance.md, Choices), with the processor's
caches cold as well (bench/e2e-findings.md), but not always to the same value: it reads an
integer outside [-2**63, 2**64) as a float where `json` keeps it exact, nests 1024 levels where
`json` gives up near 990 less the caller's stack, and refuses a few texts `json` accepts (a lone
surrogate, a UTF-8 byte order mark, UTF-16 or UTF-32, a number past a double's range). So
`loads` gives orjson only bodies where both answer alike, reads the rest with `json`, and any
error is `json`'s. The grammar is RFC 8259's: NaN and Infinity, which `json` would accept, are
refused (no API server writes them; Go's encoder cannot).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

# json reads about 990 levels of nesting, less the caller's stack depth, then gives up
# (RecursionError); orjson reads 1024. A body with fewer brackets than this nests less deep than
# json reads from any stack under ~190 frames.
_MAX_BRACKETS = 800
# orjson reads an integer outside [-2**63, 2**64) as a float, json as an exact int; such an
# integer has at least 19 digits.
_LONG_RUN = b"0" * 19
_DIGITS_AS_ZEROS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))


def loads(body: bytes) -> Any:
    """`json.loads(body)` with NaN and Infinity refused, computed by orjson where both agree.

    Raises what `json.loads` raises: ValueError (UnicodeDecodeError among them) for a body
    that is not JSON, RecursionError for one nested deeper than `json` reads.
    """
    if _orjson_agrees(body):
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass  # json decides: its value, or its error
    return json.loads(body, parse_constant=_not_json)


def _orjson_agrees(body: bytes) -> bool:
    """False for a body that may nest too deep for json or hold an integer over 64 bits.

    Counted in about a microsecond per kilobyte (`count`, `translate` and `in` run in C; a
    regex takes ten): the price of never reading such a body differently from json.
    """
    return body.count(b"[") + body.count(b"{") < _MAX_BRACKETS and _LONG_RUN not in body.translate(
        _DIGITS_AS_ZEROS
    )


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON (RFC 8259 has no NaN or Infinity)")
