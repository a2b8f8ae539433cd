"""Regenerate the docs pages that are made from code: `python -m webhook.shell.cli.docgen`.

`docs/rules.md` comes from the rule table, `docs/catalog.md` from the built-in kind profiles
and `docs/configuration.md`'s flag reference from the argument parser, so no page can drift
from the code; a test compares them.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from webhook.core.model.catalog import catalog_markdown
from webhook.core.rules.ruletable import rules_markdown
from webhook.shell.cli.main import build_parser, env_name

DOCS = Path(__file__).resolve().parents[3] / "docs"
BEGIN, END = "<!-- BEGIN GENERATED -->\n", "<!-- END GENERATED -->\n"


def flags_markdown() -> str:
    """One table per command: flag, environment variable, default, help."""
    saved = dict(os.environ)
    os.environ.clear()  # defaults must not depend on who runs `make docs`
    try:
        parser = build_parser()
    finally:
        os.environ.update(saved)
    out: list[str] = []
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in subparsers.choices.items():
        if not any(action.option_strings and action.dest != "help" for action in sub._actions):
            continue  # `config validate FILE`: nothing to configure
        out.append(
            f"### `policy-webhook {name}`\n\n| flag | environment | default | meaning |\n|---|---|---|---|\n"
        )
        for action in sub._actions:
            if not action.option_strings or action.dest == "help":
                continue
            flag = max(action.option_strings, key=len)
            # Every flag of `serve` reads its variable (the Deployment sets them); elsewhere
            # only the engine flags do, and they say so (`main._env_flag`).
            reads_env = name == "serve" or getattr(action, "env_var", None)
            env = f"`{env_name(flag)}`" if reads_env else ""
            default = (
                "" if action.default in (None, False, argparse.SUPPRESS) else f"`{action.default}`"
            )
            text = (action.help or "").replace("|", "\\|")
            out.append(f"| `{', '.join(action.option_strings)}` | {env} | {default} | {text} |\n")
        out.append("\n")
    return "".join(out)


def splice(path: Path, body: str) -> str:
    """The page with the text between the GENERATED markers replaced by `body`."""
    text = path.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + BEGIN + body + END + tail


def pages() -> dict[Path, str]:
    return {
        DOCS / "rules.md": splice(DOCS / "rules.md", rules_markdown()),
        DOCS / "configuration.md": splice(DOCS / "configuration.md", flags_markdown()),
        DOCS / "catalog.md": splice(DOCS / "catalog.md", catalog_markdown()),
    }


def main() -> int:
    for path, text in pages().items():
        path.write_text(text, encoding="utf-8")
        sys.stdout.write(f"wrote {path.relative_to(DOCS.parent)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
