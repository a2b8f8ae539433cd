"""The engine flags and the operator config file, read into what the core takes.

Shared by every command that judges or computes (`serve`, `check`, `explain`, `report`) and
by `config validate`, so that a config file means the same thing to all of them; a file that
is wrong is a `UsageError` naming the file and the field.
"""

from __future__ import annotations

import argparse

import yaml

from webhook.core.model.profiles import ConfigError, OperatorConfig, parse_config
from webhook.core.model.settings import Settings
from webhook.core.rules.ruletable import RULE_IDS
from webhook.shell.cli.manifests import load_one, yaml_problem
from webhook.shell.process.errors import UsageError

MIN_ANNOTATION_BYTES = 512


def from_args(args: argparse.Namespace) -> tuple[OperatorConfig, Settings]:
    config = load_config(args.config)
    return config, settings_from(args, config)


def load_config(path: str | None) -> OperatorConfig:
    if not path:
        return OperatorConfig()
    try:
        with open(path, encoding="utf-8") as handle:
            data = load_one(handle.read())
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read config: {exc}") from None
    except yaml.YAMLError as exc:
        line, problem = yaml_problem(exc)
        raise UsageError(f"{path}{f':{line}' if line else ''}: not valid YAML: {problem}") from None
    try:
        return parse_config(data, known_rules=RULE_IDS)
    except ConfigError as exc:
        raise UsageError(f"{path}: {exc}") from None


def settings_from(args: argparse.Namespace, config: OperatorConfig) -> Settings:
    if args.annotation_max_bytes < MIN_ANNOTATION_BYTES:
        raise UsageError(f"--annotation-max-bytes must be at least {MIN_ANNOTATION_BYTES}")
    return Settings(
        strict=args.strict,
        annotation_prefix=args.annotation_prefix,
        annotation_max_bytes=args.annotation_max_bytes,
        rule_actions=config.rule_actions,
    )
