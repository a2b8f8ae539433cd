"""`policy-webhook serve`: wiring of state, server and TLS. STUB until the server lands."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def add_flags(
    parser: argparse.ArgumentParser, *, env: Callable[..., Any], env_bool: Callable[[str], bool]
) -> None:
    parser.add_argument("--manifests", action="append", metavar="PATH")


def run(args: argparse.Namespace, **_: Any) -> int:
    raise NotImplementedError
