"""`serve`'s flags become one typed, frozen `ServeConfig` in one place; the wiring reads it."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from webhook.shell.cli.main import build_parser
from webhook.shell.cli.serve import serve_config_from
from webhook.shell.process.serve_config import ServeConfig

ENGINE_FLAGS = {"config", "strict", "annotation_prefix", "annotation_max_bytes"}  # Settings'


def serve_parser() -> argparse.ArgumentParser:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found: argparse.ArgumentParser = commands.choices["serve"]
    return found


def test_every_serve_flag_is_a_field_and_every_field_a_flag() -> None:
    flags = {a.dest for a in serve_parser()._actions if a.option_strings and a.dest != "help"}
    assert flags - ENGINE_FLAGS == {field.name for field in dataclasses.fields(ServeConfig)}


def test_the_config_is_built_from_the_parsed_flags_and_cannot_change() -> None:
    args = build_parser().parse_args(
        ["serve", "--port", "9443", "--manifests", "a", "--manifests", "b", "--no-reconcile"]
    )
    config = serve_config_from(args)
    assert (config.port, config.manifests, config.no_reconcile) == (9443, ("a", "b"), True)
    assert config.host == "0.0.0.0" and config.drain_seconds == 15.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.port = 1  # type: ignore[misc]


def test_without_manifests_the_state_comes_from_the_cluster() -> None:
    assert serve_config_from(build_parser().parse_args(["serve"])).manifests == ()


@pytest.mark.parametrize(
    ("argv", "events"),
    [([], True), (["--events=false"], False), (["--events", "off"], False), (["--events"], True)],
)
def test_events_are_on_unless_turned_off(argv: list[str], events: bool) -> None:
    assert serve_config_from(build_parser().parse_args(["serve", *argv])).events is events


def test_events_and_decision_log_read_their_environment_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POLICY_WEBHOOK_EVENTS", "false")
    monkeypatch.setenv("POLICY_WEBHOOK_LOG_DECISIONS", "denied")
    config = serve_config_from(build_parser().parse_args(["serve"]))
    assert (config.events, config.log_decisions) == (False, "denied")


def test_decision_log_default_and_choices(capsys: pytest.CaptureFixture[str]) -> None:
    assert serve_config_from(build_parser().parse_args(["serve"])).log_decisions == "warned"
    for bad in (["--log-decisions", "everything"], ["--events=maybe"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["serve", *bad])
    assert "invalid" in capsys.readouterr().err


def _env_flags() -> list[tuple[str, str]]:
    """(variable, its flag's type) of every flag an environment variable sets."""
    from webhook.shell.cli.main import env_name

    out = []
    for action in serve_parser()._actions:
        if not action.option_strings or action.dest == "help":
            continue
        kind = getattr(action.type, "__name__", "switch" if action.nargs == 0 else "str")
        if action.choices is not None:
            kind = "choice"
        out.append((env_name(action.option_strings[-1]), kind))
    return out


def test_every_typed_flag_refuses_a_value_of_its_variable_it_cannot_read_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Deployment sets the flags through these variables: a typo there is the user's
    mistake, said in one line with exit 2, as a bad flag is — never a traceback."""
    from webhook.shell.cli.main import main

    typed = [(name, kind) for name, kind in _env_flags() if kind != "str"]
    assert {kind for _, kind in typed} >= {"int", "float", "boolean", "switch", "choice"}
    for name, _ in typed:
        monkeypatch.setenv(name, "not-a-value")
        assert main(["serve", "--help"]) == 2, name
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"policy-webhook: error: {name}="), err
        monkeypatch.delenv(name)


@pytest.mark.parametrize(
    ("variable", "value", "field", "read"),
    [
        ("POLICY_WEBHOOK_PORT", "9443", "port", 9443),
        ("POLICY_WEBHOOK_RECONCILE_QPS", "2.5e2", "reconcile_qps", 250.0),
        ("POLICY_WEBHOOK_LOG_LEVEL", "debug", "log_level", "DEBUG"),
        ("POLICY_WEBHOOK_NO_RECONCILE", "yes", "no_reconcile", True),
        ("POLICY_WEBHOOK_NO_RECONCILE", "0", "no_reconcile", False),
        ("POLICY_WEBHOOK_EVENTS", "", "events", True),  # set but empty: as unset
    ],
)
def test_a_variable_is_read_as_its_flag_would_be(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, field: str, read: object
) -> None:
    monkeypatch.setenv(variable, value)
    assert getattr(serve_config_from(build_parser().parse_args(["serve"])), field) == read


@pytest.mark.parametrize("given", ["debug", "Warning", "ERROR"])
def test_log_level_is_read_in_any_case_on_the_command_line_as_from_its_variable(given: str) -> None:
    args = build_parser().parse_args(["serve", "--log-level", given])
    assert serve_config_from(args).log_level == given.upper()
