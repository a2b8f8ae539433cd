"""Load Kubernetes manifests from files and folders into a `Store` (the cluster-less state).

Files or folders (recursively, `*.yaml`, `*.yml`, `*.json`), multi-document YAML and `List`
kinds. A file that cannot be read or parsed raises `ManifestError` naming the file and line:
the CLI turns it into exit code 2, the server refuses to start — never a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from webhook.core.model import scopes
from webhook.core.model.refs import ObjectKey
from webhook.core.state.store import Store

_SUFFIXES = (".yaml", ".yml", ".json")
DEFAULT_NAMESPACE = "default"  # kubectl's, for a context that names none
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C parser is ~10x faster


class ManifestError(Exception):
    """A manifest file that cannot be used; `str()` is `path:line: what is wrong`."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path, self.line, self.message = path, line, message
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True, slots=True)
class Located:
    """One object and where it was written, so findings can point at a file and line."""

    obj: Mapping[str, Any]
    path: str
    line: int

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def find_files(paths: Iterable[str]) -> list[str]:
    """Every manifest file under `paths`, in a stable order; a missing path is an error."""
    found: list[str] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for root, dirs, files in os.walk(path):
                dirs.sort()
                found.extend(os.path.join(root, f) for f in sorted(files) if f.endswith(_SUFFIXES))
        elif path.is_file():
            found.append(str(path))
        else:
            raise ManifestError(str(path), None, "no such file or directory")
    return found


def read_file(path: str) -> Iterator[Located]:
    """The objects of one file; `List` kinds are unpacked, empty documents skipped."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(path, None, f"cannot read: {exc}") from None
    loader = _Loader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            line = node.start_mark.line + 1
            doc = loader.construct_document(node)
            yield from _unpack(doc, path, line)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise ManifestError(path, line, f"not valid YAML: {problem}") from None
    finally:
        loader.dispose()


def _unpack(doc: object, path: str, line: int) -> Iterator[Located]:
    if doc is None:
        return
    if not isinstance(doc, Mapping):
        raise ManifestError(path, line, f"a document must be a mapping, got {type(doc).__name__}")
    kind = doc.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
        for item in doc["items"]:
            yield from _unpack(item, path, line)
        return
    if not isinstance(kind, str) or not isinstance(doc.get("apiVersion"), str):
        raise ManifestError(path, line, "a document needs `apiVersion` and `kind`")
    metadata = doc.get("metadata")
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
        raise ManifestError(path, line, f"{kind} needs `metadata.name`")
    yield Located(doc, path, line)


def read_paths(paths: Iterable[str]) -> list[Located]:
    return [located for path in find_files(paths) for located in read_file(path)]


def load_store(
    paths: Iterable[str], store: Store | None = None, *, namespace: str = DEFAULT_NAMESPACE
) -> tuple[Store, dict[ObjectKey, Located]]:
    """A store holding every object under `paths`, and where each one came from.

    Each object is placed as `kubectl apply -n <namespace>` would place it (`scopes`): a
    namespaced one without a namespace gets `namespace`. Objects in the same file or folder may
    come in any order (a policy before its CRD): scopes are read from all of them first, and
    the store re-reads a kind's objects when its CRD arrives.
    """
    store = store if store is not None else Store()
    found = read_paths(paths)
    cluster_scoped = scopes.cluster_scoped_kinds(located.obj for located in found)
    where: dict[ObjectKey, Located] = {}
    for located in found:
        obj = scopes.as_applied(located.obj, namespace=namespace, cluster_scoped=cluster_scoped)
        placed = located if obj is located.obj else Located(obj, located.path, located.line)
        key = store.upsert(obj)
        if key is not None:
            where[key] = placed
    return store, where
