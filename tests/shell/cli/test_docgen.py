"""The generated docs pages agree with the code: the rule table and the flag reference."""

from __future__ import annotations

from webhook.core.rules.ruletable import RULES
from webhook.shell.cli import docgen


def test_generated_pages_are_up_to_date() -> None:
    for path, expected in docgen.pages().items():
        assert path.read_text(encoding="utf-8") == expected, (
            f"{path.name} is stale: run `make docs`"
        )


def test_every_rule_has_a_row_in_the_rules_page() -> None:
    page = (docgen.DOCS / "rules.md").read_text(encoding="utf-8")
    for rule in RULES:
        assert f"| `{rule.id}` | {rule.default_action.upper()} |" in page


def test_every_flag_and_its_environment_variable_is_documented() -> None:
    page = (docgen.DOCS / "configuration.md").read_text(encoding="utf-8")
    for flag in (
        "--tls-cert-file",
        "--manifests",
        "--strict",
        "--config",
        "--leader-election-name",
    ):
        assert f"`{flag}`" in page
    assert "`POLICY_WEBHOOK_TLS_CERT_FILE`" in page
