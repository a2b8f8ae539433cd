"""Log formatting: one JSON object per line, so log pipelines need no parser.

Structured fields travel in `extra={"fields": {...}}` (see `fields()`); they are merged into the
object next to `time`, `level`, `logger` and `msg`. Nothing here decides what gets logged.
"""

from __future__ import annotations

import datetime
import json as jsonlib
import logging
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from webhook.core.annotation import compact_json

_RESERVED = frozenset({"time", "level", "logger", "msg"})


def fields(**values: Any) -> dict[str, Any]:
    """`logger.info("msg", extra=fields(uid=...))` — reads better than the nested dict."""
    return {"fields": values}


def _fields_of(record: logging.LogRecord) -> Mapping[str, Any]:
    values = getattr(record, "fields", None)
    return values if isinstance(values, Mapping) else {}


class JsonFormatter(logging.Formatter):
    """`{"time": ..., "level": ..., "logger": ..., "msg": ..., <fields>, "exc_info": ...}`."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in _fields_of(record).items():
            # A field never hides the envelope; it is kept under a prefixed name instead.
            entry[f"field.{key}" if key in _RESERVED else key] = value
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        return _dumps(entry)


def _dumps(entry: Mapping[str, Any]) -> str:
    """One log line: compact JSON, non-ASCII unescaped; a stray non-JSON value goes through
    `str` rather than cost us the line (`compact_json`)."""
    return compact_json.dumps(entry)


class TextFormatter(logging.Formatter):
    """For people at a terminal: `time LEVEL logger: msg key=value ...`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = " ".join(
            f"{k}={jsonlib.dumps(v, ensure_ascii=False, default=str)}"
            for k, v in _fields_of(record).items()
        )
        if not extra:
            return line
        head, sep, tail = line.partition("\n")  # keep a traceback below the fields
        return f"{head} {extra}{sep}{tail}"


def setup_logging(
    level: int | str = logging.INFO, *, json: bool = True, stream: TextIO | None = None
) -> None:
    """Route every logger through one handler on the root logger (replacing earlier ones)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if json else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    # Neither formatter prints the thread or the process, so no record needs to look them up:
    # the switches of the logging HOWTO's "Optimization" section (docs/performance.md).
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
