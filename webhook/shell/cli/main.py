"""The `policy-webhook` command line (SPEC §7): serve, check, explain, rules.

Every flag can also come from an environment variable `POLICY_WEBHOOK_<FLAG>` (dashes become
underscores), which is how the Deployment sets them; a flag on the command line wins.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

import yaml

from webhook.core.model.profiles import ConfigError, OperatorConfig, parse_config
from webhook.core.model.settings import (
    DEFAULT_ANNOTATION_MAX_BYTES,
    DEFAULT_ANNOTATION_PREFIX,
    Settings,
)
from webhook.core.rules.ruletable import RULE_IDS, rules_markdown
from webhook.shell.cli import check as check_cmd
from webhook.shell.cli.manifests import DEFAULT_NAMESPACE, ManifestError, load_store
from webhook.shell.process.errors import UsageError

ENV_PREFIX = "POLICY_WEBHOOK_"


def env_name(flag: str) -> str:
    return ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper()


def _env(flag: str, default: Any = None) -> Any:
    return os.environ.get(env_name(flag), default)


def _env_bool(flag: str) -> bool:
    return os.environ.get(env_name(flag), "").lower() in ("1", "true", "yes", "on")


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    """Flags that change what the rules and the engine answer; shared by every command."""
    parser.add_argument(
        "--config",
        default=_env("--config"),
        metavar="FILE",
        help="operator config: kind profiles and rule actions (YAML, see docs/configuration.md)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        default=_env_bool("--strict"),
        help="turn every WARN finding into DENY",
    )
    parser.add_argument(
        "--annotation-prefix",
        default=_env("--annotation-prefix", DEFAULT_ANNOTATION_PREFIX),
        help=f"prefix of the effective-policies annotation (default {DEFAULT_ANNOTATION_PREFIX})",
    )
    parser.add_argument("--annotation-max-bytes", type=int,
                        default=int(_env("--annotation-max-bytes", DEFAULT_ANNOTATION_MAX_BYTES)),
                        help="size cap of the annotation value before it is truncated (default 16384)")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="policy-webhook",
        description="Admission webhook that makes Gateway API policy attachment safe and visible.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the admission webhook (HTTPS)")
    add_engine_flags(serve)
    # The server pulls in aiohttp: only when needed.
    from webhook.shell.cli import serve as serve_cmd

    serve_cmd.add_flags(serve, env=_env, env_bool=_env_bool)

    check = sub.add_parser(
        "check", help="admit every policy under PATH offline, as the webhook would"
    )
    add_engine_flags(check)
    check.add_argument(
        "paths", nargs="+", metavar="PATH", help="files or folders of YAML manifests"
    )
    check.add_argument("-o", "--output", choices=("human", "json"), default="human")
    check.add_argument(
        "-n",
        "--namespace",
        default=DEFAULT_NAMESPACE,
        help="namespace of namespaced objects that name none, as `kubectl apply -n` gives "
        f"them (default {DEFAULT_NAMESPACE})",
    )

    explain = sub.add_parser("explain", help="why an object gets the effective policy it gets")
    add_engine_flags(explain)
    explain.add_argument("target", metavar="KIND/NAME", help="e.g. HTTPRoute/storefront or svc/foo")
    explain.add_argument("-n", "--namespace", default="default")
    explain.add_argument("--manifests", action="append", metavar="PATH",
                         help="read state from these files/folders instead of a cluster")  # fmt: skip
    explain.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    explain.add_argument("-o", "--output", choices=("table", "json"), default="table")

    rules = sub.add_parser("rules", help="print the rule table")
    rules.add_argument("--markdown", action="store_true", help="as the docs/rules.md table")
    return parser


def load_config(path: str | None) -> OperatorConfig:
    if not path:
        return OperatorConfig()
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"{path}: cannot read config: {exc}") from None
    try:
        return parse_config(data, known_rules=RULE_IDS)
    except ConfigError as exc:
        raise UsageError(f"{path}: {exc}") from None


def settings_from(args: argparse.Namespace, config: OperatorConfig) -> Settings:
    if args.annotation_max_bytes < 512:
        raise UsageError("--annotation-max-bytes must be at least 512")
    return Settings(
        strict=args.strict,
        annotation_prefix=args.annotation_prefix,
        annotation_max_bytes=args.annotation_max_bytes,
        rule_actions=config.rule_actions,
    )


def run_check(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    settings = settings_from(args, config)
    from webhook.core.state.store import Store

    store, where = load_store(args.paths, Store(config), namespace=args.namespace)
    results = check_cmd.check_store(store, where, settings)
    if args.output == "json":
        check_cmd.print_json(results, sys.stdout)
    else:
        check_cmd.print_human(results, sys.stdout)
    return check_cmd.exit_code(results)


def run_rules(args: argparse.Namespace) -> int:
    from webhook.core.rules.ruletable import RULES

    if args.markdown:
        sys.stdout.write(rules_markdown())
        return 0
    for rule in RULES:
        sys.stdout.write(f"{rule.id}  {rule.default_action.upper():5}  {rule.meaning}\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            return run_check(args)
        if args.command == "rules":
            return run_rules(args)
        config = load_config(args.config)
        settings = settings_from(args, config)
        if args.command == "explain":
            from webhook.shell.cli import explain as explain_cmd

            return explain_cmd.run(args, config=config, settings=settings)
        from webhook.shell.cli import serve as serve_cmd

        return serve_cmd.run(args, config=config, settings=settings)
    except (UsageError, ManifestError) as exc:
        sys.stderr.write(f"policy-webhook: error: {exc}\n")
        return check_cmd.EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `policy-webhook check ... | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
