"""Errors of the command line: a user's mistake becomes exit code 2 and one line, never a traceback."""

from __future__ import annotations


class UsageError(Exception):
    """A mistake on the command line or in a file it names: exit code 2 with the message."""
