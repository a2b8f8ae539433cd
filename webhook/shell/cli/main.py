"""The `policy-webhook` command line (SPEC §7): serve, check, explain, report, rules, version,
config.

`serve`'s flags, and the engine flags of every command, can also come from an environment
variable `POLICY_WEBHOOK_<FLAG>` (dashes become underscores), which is how the Deployment
sets them; a flag on the command line wins.

Start-up is part of the interface: `--help`, `version` and `check` run in CI loops and shells.
This module imports only the standard library; a command's flags are added when that command
is chosen (`serve`'s module imports the HTTPS server), and a command imports what it needs when
it runs.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from webhook.shell.process.errors import UsageError

if TYPE_CHECKING:
    from webhook.shell.cluster.kubeconfig import Target

PROG = "policy-webhook"
PLUGIN_PROG = "kubectl policy-attachment"  # as kubectl runs `kubectl-policy_attachment`
ENV_PREFIX = "POLICY_WEBHOOK_"
EXIT_ERROR = 2
DEFAULT_REQUEST_TIMEOUT = "30s"


def env_name(flag: str) -> str:
    return ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper()


def _env(
    flag: str,
    default: Any = None,
    *,
    type: Callable[[str], Any] | None = None,  # argparse's word for it
    choices: Sequence[Any] | None = None,
) -> Any:
    """The flag's default from its environment variable (`default` when unset or empty), read
    as argparse reads the flag: converted by `type`, one of `choices`. A value it cannot read
    is a usage error naming the variable — argparse checks neither of a default."""
    name = env_name(flag)
    raw = os.environ.get(name, "")
    if not raw:
        return default
    try:
        value = type(raw) if type is not None else raw
    except (ValueError, argparse.ArgumentTypeError) as exc:
        reason = (
            str(exc)
            if isinstance(exc, argparse.ArgumentTypeError)
            else _NOT_A.get(type, "not a value this flag takes")
        )
        raise UsageError(f"{name}={raw!r}: {reason}") from None
    if choices is not None and value not in choices:
        raise UsageError(f"{name}={raw!r}: expected one of {', '.join(map(str, choices))}")
    return value


_NOT_A: dict[Any, str] = {int: "not an integer", float: "not a number"}


def _env_bool(flag: str) -> bool:
    """A switch's default: true, false (also 1/0, yes/no, on/off) or unset."""
    return bool(_env(flag, False, type=boolean))


def boolean(text: str) -> bool:
    """`--events=false`: true or false (also 1/0, yes/no, on/off), in any case."""
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _env_flag(parser: argparse.ArgumentParser, flag: str, **kwargs: Any) -> None:
    """A flag whose default comes from its environment variable; marked so for the docs."""
    action = parser.add_argument(flag, **kwargs)
    action.env_var = env_name(flag)  # type: ignore[attr-defined]


# --- the parser ------------------------------------------------------------------------------


class _Commands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Sub-commands whose flags are added when the command is chosen, not when the parser is
    built: `policy-webhook --help` must not import what `serve` needs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fillers: dict[str, Callable[[argparse.ArgumentParser], None]] = {}

    def add(
        self, name: str, fill: Callable[[argparse.ArgumentParser], None], **kwargs: Any
    ) -> None:
        self.add_parser(name, **kwargs)
        self.fillers[name] = fill

    def fill(self, name: str) -> None:
        filler = self.fillers.pop(name, None)
        if filler is not None:
            filler(self.choices[name])

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        if values and values[0] in self.choices:
            self.fill(values[0])
        super().__call__(parser, namespace, values, option_string)


class _PrintVersion(argparse.Action):
    """`--version`: the build's line, computed only when asked for (it may run git)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        from webhook.shell.process.build import build_info

        sys.stdout.write(build_info().line() + "\n")
        parser.exit()


def build_parser(prog: str = PROG, *, lazy: bool = False) -> argparse.ArgumentParser:
    """The parser; `lazy` (the command line's own) adds a command's flags only once the
    command is chosen, the others (docs, tests) get every flag at once."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Admission webhook that makes Gateway API policy attachment safe and visible.",
    )
    parser.add_argument("--version", action=_PrintVersion, help="print the version and exit")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", action=_Commands
    )
    assert isinstance(commands, _Commands)
    commands.add("serve", _serve_flags, help="run the admission webhook (HTTPS)")
    commands.add(
        "check",
        _check_flags,
        help="admit every policy in files, folders or stdin offline, as the webhook would",
    )
    commands.add(
        "explain",
        _explain_flags,
        help="why an object gets the effective policy it gets, or what a policy reaches",
    )
    commands.add(
        "report",
        _report_flags,
        help="what is wrong with the policies now: the PolicyReports, computed afresh",
    )
    commands.add("rules", _rules_flags, help="print the rule table")
    commands.add("version", _version_flags, help="print the version and the git revision")
    commands.add("config", _config_flags, help="operator config file: `config validate FILE`")
    if not lazy:
        for name in list(commands.fillers):
            commands.fill(name)
    return parser


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    """Flags that change what the rules and the engine answer; shared by every command."""
    from webhook.core.model.settings import DEFAULT_ANNOTATION_MAX_BYTES, DEFAULT_ANNOTATION_PREFIX

    _env_flag(parser, "--config", default=_env("--config"), metavar="FILE",
              help="operator config: kind profiles and rule actions (YAML, see docs/configuration.md)")  # fmt: skip
    _env_flag(parser, "--strict", action="store_true", default=_env_bool("--strict"),
              help="turn every WARN finding into DENY")  # fmt: skip
    _env_flag(parser, "--annotation-prefix", default=_env("--annotation-prefix", DEFAULT_ANNOTATION_PREFIX),
              help=f"prefix of the effective-policies annotation (default {DEFAULT_ANNOTATION_PREFIX})")  # fmt: skip
    _env_flag(parser, "--annotation-max-bytes", type=int,
              default=_env("--annotation-max-bytes", DEFAULT_ANNOTATION_MAX_BYTES, type=int),
              help="size cap of the annotation value before it is truncated (default 16384)")  # fmt: skip


def _serve_flags(parser: argparse.ArgumentParser) -> None:
    add_engine_flags(parser)
    from webhook.shell.cli import serve as serve_cmd  # the server's module: only for `serve`

    serve_cmd.add_flags(parser, env=_env, env_bool=_env_bool)


def _check_flags(parser: argparse.ArgumentParser) -> None:
    add_engine_flags(parser)
    add = parser.add_argument
    add("paths", nargs="*", metavar="PATH",
        help="files or folders of YAML/JSON manifests; `-` reads standard input")  # fmt: skip
    add("-f", "--filename", action="append", dest="filenames", metavar="PATH",
        help="as kubectl's -f: a file, a folder or `-` (standard input); repeatable")  # fmt: skip
    add("-o", "--output", choices=("human", "json", "yaml", "sarif"), default="human",
        help="human lines; json or yaml (docs/cli.md); sarif for code-review annotations")  # fmt: skip
    add("-n", "--namespace", default="default",
        help="namespace of namespaced objects that name none, as `kubectl apply -n` gives them (default default)")  # fmt: skip
    add("--all", action="store_true",
        help="print every warning (default: at most 10 lines per policy, as the webhook sends)")  # fmt: skip


def _explain_flags(parser: argparse.ArgumentParser) -> None:
    add_engine_flags(parser)
    add = parser.add_argument
    add("target", nargs="+", metavar="KIND/NAME",
        help="an object (HTTPRoute/storefront, `svc foo`) or a policy (RetryPolicy/gw-retry)")  # fmt: skip
    add("-n", "--namespace", default=None,
        help="namespace of the object (default: the kubeconfig context's, else default)")  # fmt: skip
    add("--manifests", action="append", metavar="PATH",
        help="read state from these files/folders instead of a cluster")  # fmt: skip
    _cluster_flags(parser)
    add("-o", "--output", choices=("table", "json", "yaml"), default="table",
        help="table for people; json or yaml: the full result (docs/cli.md)")  # fmt: skip


def _cluster_flags(parser: argparse.ArgumentParser) -> None:
    """kubectl's connection flags, for a command that reads the cluster once."""
    add = parser.add_argument
    add("--kubeconfig", default=None, metavar="FILE",
        help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")  # fmt: skip
    add("--context", default=None, help="the kubeconfig context to use (default: its current one)")
    add("--request-timeout", type=duration, default=DEFAULT_REQUEST_TIMEOUT, metavar="DURATION",
        help=f"give up on a request to the API server after this long (30s, 1m; 0: never; default {DEFAULT_REQUEST_TIMEOUT})")  # fmt: skip


def _report_flags(parser: argparse.ArgumentParser) -> None:
    add_engine_flags(parser)
    add = parser.add_argument
    where = parser.add_mutually_exclusive_group()
    where.add_argument("-n", "--namespace", default=None,
                       help="the report of this namespace (default: the kubeconfig context's, else default)")  # fmt: skip
    where.add_argument("-A", "--all-namespaces", action="store_true",
                       help="every namespace's report, and the cluster's")  # fmt: skip
    add("--manifests", action="append", metavar="PATH",
        help="read state from these files/folders instead of a cluster")  # fmt: skip
    _cluster_flags(parser)
    add("--webhook-configuration", default="policy-webhook", metavar="NAME",
        help="ValidatingWebhookConfiguration of the policy webhooks, for PA-K02 (cluster only; default policy-webhook)")  # fmt: skip
    add("-o", "--output", choices=("table", "json", "yaml"), default="table",
        help="table for people; json or yaml: the reports whole (docs/cli.md)")  # fmt: skip


def _rules_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--markdown", action="store_true", help="as the docs/rules.md table")


def _version_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text",
                        help="one line; json or yaml: version, gitCommit, gitTreeState, python, core")  # fmt: skip


def _config_flags(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    validate = actions.add_parser("validate", help="read an operator config file; exit 2 if wrong")
    validate.add_argument("file", metavar="FILE")


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def duration(text: str) -> float:
    """kubectl's `--request-timeout`: `0`, `30`, `30s`, `1m30s`, `500ms` → seconds."""
    text = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = _DURATION.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 30s, 1m or 0")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


# --- running a command -----------------------------------------------------------------------


def _run_check(args: argparse.Namespace) -> int:
    from webhook.shell.cli import check, engine_options

    config, settings = engine_options.from_args(args)
    return check.run(args, config=config, settings=settings)


def _cluster_target(args: argparse.Namespace) -> Target | None:
    """Without `--manifests`, the cluster, found answering before the engine loads."""
    if args.manifests:
        return None
    from webhook.shell.cli import connection

    return connection.reach(args)


def _run_explain(args: argparse.Namespace) -> int:
    target = _cluster_target(args)
    from webhook.shell.cli import engine_options, explain

    config, settings = engine_options.from_args(args)
    return explain.run(args, config=config, settings=settings, target=target)


def _run_report(args: argparse.Namespace) -> int:
    target = _cluster_target(args)
    from webhook.shell.cli import engine_options, report

    config, settings = engine_options.from_args(args)
    return report.run(args, config=config, settings=settings, target=target)


def _run_serve(args: argparse.Namespace) -> int:
    from webhook.shell.cli import engine_options, serve

    config, settings = engine_options.from_args(args)
    return serve.run(serve.serve_config_from(args), config=config, settings=settings)


def _run_rules(args: argparse.Namespace) -> int:
    from webhook.core.rules.ruletable import RULES, rules_markdown

    if args.markdown:
        sys.stdout.write(rules_markdown())
        return 0
    for rule in RULES:
        sys.stdout.write(f"{rule.id}  {rule.default_action.upper():5}  {rule.meaning}\n")
    return 0


def _run_version(args: argparse.Namespace) -> int:
    from webhook.shell.process.build import build_info

    info = build_info()
    if args.output == "text":
        sys.stdout.write(info.line() + "\n")
        return 0
    from webhook.shell.cli import output

    output.write(info.as_json(), args.output, sys.stdout)
    return 0


def _run_config(args: argparse.Namespace) -> int:
    from webhook.shell.cli import engine_options

    config = engine_options.load_config(args.file)
    kinds, actions = len(config.kinds), len(config.rule_actions)
    sys.stdout.write(
        f"{args.file}: valid ({kinds} kind profile{'s' * (kinds != 1)}, "
        f"{actions} global rule action{'s' * (actions != 1)})\n"
    )
    return 0


_RUNS: dict[str, Callable[[argparse.Namespace], int]] = {
    "check": _run_check,
    "explain": _run_explain,
    "report": _run_report,
    "serve": _run_serve,
    "rules": _run_rules,
    "version": _run_version,
    "config": _run_config,
}


def main(argv: Sequence[str] | None = None, *, prog: str = PROG) -> int:
    try:
        # Inside: a command's flags are added as it is chosen, and an environment variable
        # that sets one of them wrongly is a usage error too.
        args = build_parser(prog, lazy=True).parse_args(argv)
        return _RUNS[args.command](args)
    except UsageError as exc:  # a file named on the command line (ManifestError) included
        sys.stderr.write(f"{prog}: error: {exc}\n")
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `policy-webhook check ... | head`
        # Python would complain again at exit, flushing into the closed pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def kubectl_plugin() -> int:
    """`kubectl-policy_attachment`: kubectl runs it for `kubectl policy-attachment …`."""
    return main(prog=PLUGIN_PROG)


if __name__ == "__main__":
    sys.exit(main())
