"""The prose of a generated page: named `string.Template` snippets, read from one file.

A snippet starts at a line `[[name]]` (anything after the brackets is a note for the reader)
and runs to the next; blank lines at its end only separate it from the next one. Filling uses
`Template.substitute`: a placeholder without a value is a `KeyError`, never a `$name` on a page.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

_HEADER = re.compile(r"\[\[(\w+)\]\].*")


@dataclass(frozen=True, slots=True)
class Prose:
    path: Path
    snippets: Mapping[str, string.Template]

    def text(self, name: str, values: Mapping[str, object], /, **more: object) -> str:
        """The snippet filled in; a missing value or an unknown name raises `KeyError`."""
        template = self.snippets[name]
        try:
            return template.substitute(values, **more)
        except KeyError as missing:
            raise KeyError(f"{self.path.name} [[{name}]]: no value for {missing}") from None

    def aside(self, name: str, values: Mapping[str, object], /, **more: object) -> str:
        """The snippet as a clause that follows a sentence: with its leading space."""
        return " " + self.text(name, values, **more)

    def lines(self, name: str, values: Mapping[str, object], /, **more: object) -> list[str]:
        return self.text(name, values, **more).split("\n")

    def block(self, name: str, values: Mapping[str, object], /, **more: object) -> list[str]:
        """The snippet's lines and the blank line that ends a Markdown block."""
        return [*self.lines(name, values, **more), ""]


def load(path: Path) -> Prose:
    """Every snippet of the file; text before the first header is the file's own comment."""
    snippets: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        header = _HEADER.fullmatch(line)
        if header:
            if header[1] in snippets:
                raise ValueError(f"{path}: snippet {header[1]!r} defined twice")
            current = snippets[header[1]] = []
        elif current is not None:
            current.append(line)
    return Prose(
        path=path,
        snippets={
            name: string.Template("\n".join(lines).rstrip("\n")) for name, lines in snippets.items()
        },
    )
