"""Settings the core reads: one frozen value built once by the shell from flags and env."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from webhook.core.model.profiles import Action

DEFAULT_ANNOTATION_PREFIX = "policy-attachment.dev"
DEFAULT_ANNOTATION_MAX_BYTES = 16 * 1024  # SPEC §3.3: 16 KiB unless configured


@dataclass(frozen=True, slots=True)
class Settings:
    strict: bool = False  # SPEC §2.4: every WARN becomes DENY
    annotation_prefix: str = DEFAULT_ANNOTATION_PREFIX
    annotation_max_bytes: int = DEFAULT_ANNOTATION_MAX_BYTES
    # Global per-rule actions from the operator config (a kind profile's own win over these).
    rule_actions: Mapping[str, Action] = field(default_factory=dict)
    max_impact_lines: int = 5
    # PA-C04 (and C02/C03): effective policies compared before/after on at most this many
    # affected objects, the least specific first (Gateways, then routes, then Services), so
    # an admission stays fast on a Gateway with thousands of routes; the line says so.
    max_impact_objects: int = 25  # PA-C04 lines per admission; the rest are counted, not listed

    @property
    def annotation_key(self) -> str:
        return f"{self.annotation_prefix}/effective-policies"
