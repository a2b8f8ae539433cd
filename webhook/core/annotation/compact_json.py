"""Compact JSON text, non-ASCII as is, written by orjson where it writes what `json` would.

Two writers need it: the annotation value (`summary.dump`, keys sorted) and the JSON log lines
(`shell.logs`). orjson is faster on both (docs/performance.md, Choices) and writes the
same bytes, with these exceptions:
- dates and dataclasses, which orjson would write its own way, go to `default=str`, as json
  sends them (it has no encoder for either);
- what orjson refuses — a lone surrogate, a key that is not a str, an int beyond 64 bits, all
  only reachable from YAML or a stray log argument — is written by json instead;
- floats with a two-digit negative exponent (`1e-7`, json `1e-07`) and NaN/infinities (`null`)
  are spelt orjson's way (docs/decisions.md); JSON from the API server holds neither. So is a
  plain Enum member (its value; json: `str(member)`), which neither writer is given.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_PASSTHROUGH = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def dumps(value: Any, *, sort_keys: bool = False) -> str:
    """`json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)`, faster."""
    option = _PASSTHROUGH | orjson.OPT_SORT_KEYS if sort_keys else _PASSTHROUGH
    try:
        return orjson.dumps(value, default=str, option=option).decode()
    except TypeError:  # orjson.JSONEncodeError: what it refuses, json writes
        return json.dumps(
            value, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False, default=str
        )
