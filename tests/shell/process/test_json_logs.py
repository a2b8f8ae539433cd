"""Log lines: one JSON object per line, with the structured fields beside the envelope."""

from __future__ import annotations

import datetime
import io
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from webhook.shell.process.logs import JsonFormatter, fields, setup_logging


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    """`setup_logging` replaces the root handlers; put pytest's back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield root
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def record(
    msg: str, *args: object, level: int = logging.INFO, **extra: object
) -> logging.LogRecord:
    return logging.getLogger("webhook.test").makeRecord(
        "webhook.test", level, __file__, 1, msg, args, None, extra=extra or None
    )


def test_a_record_is_one_json_object_with_time_level_logger_and_msg() -> None:
    line = JsonFormatter().format(record("admission %s", "denied"))
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "INFO"
    assert entry["logger"] == "webhook.test"
    assert entry["msg"] == "admission denied"
    assert entry["time"].endswith("+00:00")


def test_fields_are_merged_and_never_hide_the_envelope() -> None:
    entry = json.loads(
        JsonFormatter().format(record("m", **fields(uid="u1", rules=["PA-S01"], msg="x")))
    )
    assert entry["uid"] == "u1"
    assert entry["rules"] == ["PA-S01"]
    assert entry["msg"] == "m"
    assert entry["field.msg"] == "x"


def test_values_json_cannot_encode_are_written_as_text() -> None:
    entry = json.loads(JsonFormatter().format(record("m", **fields(where=object.__new__(object)))))
    assert entry["where"].startswith("<object object")


def test_a_traceback_stays_inside_the_one_line() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        made = logging.getLogger("webhook.test").makeRecord(
            "webhook.test", logging.ERROR, __file__, 1, "failed", (), sys.exc_info()
        )
    line = JsonFormatter().format(made)
    assert "\n" not in line
    assert "RuntimeError: boom" in json.loads(line)["exc_info"]


def test_setup_logging_json_routes_every_logger_through_one_handler(
    root_logger: logging.Logger,
) -> None:
    out = io.StringIO()
    setup_logging("debug", json=True, stream=out)
    logging.getLogger("webhook.shell.https.server").debug("hello", extra=fields(port=8443))
    (line,) = out.getvalue().splitlines()
    assert json.loads(line) | {"time": None} == {
        "time": None, "level": "DEBUG", "logger": "webhook.shell.https.server", "msg": "hello", "port": 8443,
    }  # fmt: skip
    assert len(root_logger.handlers) == 1


def test_setup_logging_text_is_for_people(root_logger: logging.Logger) -> None:
    out = io.StringIO()
    setup_logging(logging.INFO, json=False, stream=out)
    logging.getLogger("webhook.x").info("listening", extra=fields(port=8443, host="::"))
    logging.getLogger("webhook.x").debug("not shown")
    (line,) = out.getvalue().splitlines()
    assert line.endswith('INFO webhook.x: listening port=8443 host="::"')


def json_line(record: logging.LogRecord, values: dict[str, object]) -> str:
    """The line the formatter wrote before it used orjson, written here with json."""
    entry = {
        "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
            timespec="milliseconds"
        ),
        "level": record.levelname,
        "logger": record.name,
        "msg": record.getMessage(),
        **values,
    }
    return json.dumps(entry, ensure_ascii=False, default=str, separators=(",", ":"))


@pytest.mark.parametrize(
    "values",
    [
        {"uid": "u-1", "rules": ["PA-S01", "PA-C04"], "latency_ms": 0.123, "dry_run": False},
        {"name": "café — 東京 😀", "namespace": "".join(map(chr, range(0x20))) + "\x7f\u2028"},
        {"uid": "lone \ud800 surrogate", "n": 1},  # orjson refuses: json writes it, escaped
        {"review": {"object": {"spec": {"big": 2**64, "keys": {1: "one"}}}}},  # orjson refuses
        {"where": object.__new__(object), "path": Path("/x"), "nothing": None, "drain_s": 15.0},
        {"at": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)},  # str(), as json
    ],
    ids=["decision", "non-ascii", "lone-surrogate", "huge-int", "not-json", "datetime"],
)
def test_a_line_is_the_one_json_wrote(values: dict[str, object]) -> None:
    made = record("admission %s", "allowed", **fields(**values))
    assert JsonFormatter().format(made) == json_line(made, values)
