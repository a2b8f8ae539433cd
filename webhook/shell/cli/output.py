"""Documents for machines, printed as JSON or YAML: the same data either way.

YAML is written from the JSON form, so both parse back to equal values (tuples become lists,
mappings plain dicts) and a script may switch between `-o json` and `-o yaml` freely.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

import yaml

_Dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def write_json(document: Any, out: TextIO) -> None:
    json.dump(document, out, indent=2)
    out.write("\n")


def write_yaml(document: Any, out: TextIO) -> None:
    plain = json.loads(json.dumps(document))
    yaml.dump(plain, out, Dumper=_Dumper, sort_keys=False, default_flow_style=False)


def write(document: Any, output_format: str, out: TextIO) -> None:
    """`output_format` is `json` or `yaml`."""
    (write_yaml if output_format == "yaml" else write_json)(document, out)
