"""Load Kubernetes manifests from files, folders and standard input into a `Store`.

Files or folders (recursively, `*.yaml`, `*.yml`, `*.json`), `-` for standard input (what
`kustomize build` or `helm template` print), multi-document YAML and `List` kinds. A folder
of real repository content holds more than objects: a document that is not a Kubernetes object
(a kustomization, Helm values, a package.json) and a file that is a template rather than YAML
are skipped, each with a reason (`Skipped`). The same object written twice is a `Duplicate`:
the later copy is kept, as `kubectl apply` of both would leave it. A file that cannot be read
or parsed raises `ManifestError` naming the file and line: the CLI turns it into exit code 2,
the server refuses to start — never a traceback.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml

from webhook.core.model import scopes
from webhook.core.model.refs import ObjectKey
from webhook.core.rules.check_results import Duplicate, Skipped, Where
from webhook.core.state.store import Store
from webhook.shell.process.errors import UsageError

log = logging.getLogger(__name__)

_SUFFIXES = (".yaml", ".yml", ".json")
DEFAULT_NAMESPACE = "default"  # kubectl's, for a context that names none
STDIN = "-"
STDIN_NAME = "<stdin>"
_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C parser, where built


class _Loader(_BaseLoader):  # type: ignore[misc]
    """YAML as kubectl reads it: a key written twice in one mapping is an error, not the last
    one winning (PyYAML keeps the last silently; kubectl refuses the file). Two files joined
    without `---` between them are then an error, not one object made of both."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
        first: dict[tuple[str, str], yaml.Node] = {}
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *defaults` may repeat what follows it: that is what it is for
            seen = first.setdefault((key.tag, key.value), key)
            if seen is not key:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {key.value!r} is written twice in one mapping "
                    f"(first on line {seen.start_mark.line + 1})",
                    key.start_mark,
                )
        return super().construct_mapping(node, deep=deep)


def load_one(text: str) -> Any:
    """The single YAML document in `text`, read as manifests are (`_Loader`)."""
    loader = _Loader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def yaml_problem(exc: yaml.YAMLError) -> tuple[int | None, str]:
    """The line (1-based) and the one-line problem of a YAML error."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return (mark.line + 1 if mark is not None else None), problem


_KUSTOMIZE_GROUP = "kustomize.config.k8s.io"
_FIELD_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")  # `spec.targetRefs[1].kind` → its steps


class ManifestError(UsageError):
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
    # The parsed YAML of the object, kept only when asked (`check`): it knows the line of
    # every field, so a finding can point at the field rather than at the document.
    node: yaml.Node | None = field(default=None, compare=False, repr=False)

    @property
    def where(self) -> str:
        return str(self.place)

    @property
    def place(self) -> Where:
        return Where(self.path, self.line)

    def line_of(self, field_path: str) -> int:
        """The line of `field_path` (`spec.targetRefs[1].kind`), or of its deepest part that
        is written; the document's line without a kept node."""
        node, line = self.node, self.line
        for name, index in _FIELD_STEP.findall(field_path):
            found = _child(node, name, int(index) if index else None)
            if found is None:
                break
            node, line = found
        return line


def _child(node: yaml.Node | None, name: str, index: int | None) -> tuple[yaml.Node, int] | None:
    """A mapping's value under key `name` (at the key's line), or a sequence's item."""
    if isinstance(node, yaml.MappingNode) and index is None:
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == name:
                return value, key.start_mark.line + 1
    if isinstance(node, yaml.SequenceNode) and index is not None and index < len(node.value):
        item = node.value[index]
        return item, item.start_mark.line + 1
    return None


@dataclass(slots=True)
class Loaded:
    """A store filled from manifests, where each object came from, and what was left out."""

    store: Store
    where: dict[ObjectKey, Located]
    skipped: list[Skipped]
    duplicates: list[Duplicate]

    @property
    def notes(self) -> list[str]:
        """One line per skipped document, as a command prints it after `note: `."""
        return [f"{skipped.where}: skipped: {skipped.reason}" for skipped in self.skipped]


def find_files(paths: Iterable[str]) -> list[str]:
    """Every manifest file under `paths`, each once, in a stable order; `-` (standard input)
    stays where it is; a missing path is an error."""
    found: list[str] = []
    seen: set[str] = set()

    def add(path: str) -> None:
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            found.append(path)

    for raw in paths:
        path = Path(raw)
        if raw == STDIN:
            found.append(STDIN)
        elif path.is_dir():
            for root, dirs, files in os.walk(path):
                dirs.sort()
                for name in sorted(files):
                    if name.endswith(_SUFFIXES):
                        add(os.path.join(root, name))
        elif path.exists():  # a file, or what reads as one: `<(kustomize build)`, /dev/stdin
            add(str(path))
        else:
            raise ManifestError(str(path), None, "no such file or directory")
    if found.count(STDIN) > 1:
        raise ManifestError(STDIN, None, "standard input can be read only once")
    return found


def read_file(path: str, *, keep_nodes: bool = False) -> list[Located | Skipped]:
    """The objects of one file (`List` kinds unpacked, empty documents left out), and the
    documents in it that are not objects."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(path, None, f"cannot read: {exc}") from None
    return read_text(text, path, keep_nodes=keep_nodes)


def read_text(text: str, path: str, *, keep_nodes: bool = False) -> list[Located | Skipped]:
    """As `read_file`, for text already read (standard input); `path` names it in messages."""
    found: list[Located | Skipped] = []
    loader = _Loader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            doc = loader.construct_document(node)
            found.extend(_unpack(doc, node, path, keep_nodes))
    except yaml.YAMLError as exc:
        line, problem = yaml_problem(exc)
        if "{{" in text:  # Helm's or another Go template: YAML only once rendered
            return [Skipped(Where(path, line or 1), _TEMPLATE)]
        raise ManifestError(path, line, f"not valid YAML: {problem}") from None
    finally:
        loader.dispose()
    return found


_TEMPLATE = "a template, not YAML: render it first (`helm template … | policy-webhook check -`)"


def _unpack(
    doc: object, node: yaml.Node, path: str, keep_nodes: bool
) -> Iterator[Located | Skipped]:
    where = Where(path, node.start_mark.line + 1)
    if doc is None:
        return
    if not isinstance(doc, Mapping):
        yield Skipped(where, f"not a Kubernetes object (a {_type_word(doc)})")
        return
    kind, api_version = doc.get("kind"), doc.get("apiVersion")
    if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
        item_nodes = _child(node, "items", None)
        nodes = (
            item_nodes[0].value
            if item_nodes and isinstance(item_nodes[0], yaml.SequenceNode)
            else []
        )
        for i, item in enumerate(doc["items"]):
            yield from _unpack(item, nodes[i] if i < len(nodes) else node, path, keep_nodes)
        return
    if isinstance(api_version, str) and api_version.startswith(_KUSTOMIZE_GROUP + "/"):
        yield Skipped(
            where,
            f"a {kind or 'kustomize file'}, not a Kubernetes object: check what it builds "
            "(`kubectl kustomize DIR | policy-webhook check -`)",
        )
        return
    if not isinstance(kind, str) or not isinstance(api_version, str):
        yield Skipped(where, "not a Kubernetes object (no `apiVersion` and `kind`)")
        return
    metadata = doc.get("metadata")
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
        yield Skipped(where, f"not a Kubernetes object ({kind} without `metadata.name`)")
        return
    yield Located(doc, path, where.line, node if keep_nodes else None)


def _type_word(value: object) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    return type(value).__name__


def read_sources(
    paths: Iterable[str], *, stdin: TextIO | None = None, keep_nodes: bool = False
) -> list[Located | Skipped]:
    """Everything under `paths`, in order; `-` reads `stdin`."""
    found: list[Located | Skipped] = []
    for path in find_files(paths):
        if path == STDIN:
            if stdin is None:
                raise ManifestError(STDIN, None, "standard input is not available here")
            found.extend(read_text(stdin.read(), STDIN_NAME, keep_nodes=keep_nodes))
        else:
            found.extend(read_file(path, keep_nodes=keep_nodes))
    return found


def read_paths(paths: Iterable[str]) -> list[Located]:
    """The objects under `paths` (files and folders), without what was skipped."""
    return [item for item in read_sources(paths) if isinstance(item, Located)]


def load(
    paths: Iterable[str],
    store: Store | None = None,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    stdin: TextIO | None = None,
    keep_nodes: bool = False,
) -> Loaded:
    """A store holding every object under `paths`, where each one came from, the documents
    skipped and the objects written twice.

    Each object is placed as `kubectl apply -n <namespace>` would place it (`scopes`): a
    namespaced one without a namespace gets `namespace`. Objects in the same file or folder may
    come in any order (a policy before its CRD): scopes are read from all of them first, and
    the store re-reads a kind's objects when its CRD arrives.
    """
    store = store if store is not None else Store()
    items = read_sources(paths, stdin=stdin, keep_nodes=keep_nodes)
    found = [item for item in items if isinstance(item, Located)]
    skipped = [item for item in items if isinstance(item, Skipped)]
    for item in skipped:
        log.info("skipped %s: %s", item.where, item.reason)
    cluster_scoped = scopes.cluster_scoped_kinds(located.obj for located in found)
    where: dict[ObjectKey, Located] = {}
    duplicates: list[Duplicate] = []
    for located in found:
        obj = scopes.as_applied(located.obj, namespace=namespace, cluster_scoped=cluster_scoped)
        placed = (
            located
            if obj is located.obj
            else Located(obj, located.path, located.line, located.node)
        )
        key = store.upsert(obj)
        if key is None:
            continue
        earlier = where.get(key)
        if earlier is not None:
            duplicates.append(Duplicate(key, used=placed.place, ignored=earlier.place))
        where[key] = placed
    return Loaded(store, where, skipped, duplicates)


def load_store(
    paths: Iterable[str], store: Store | None = None, *, namespace: str = DEFAULT_NAMESPACE
) -> tuple[Store, dict[ObjectKey, Located]]:
    """`load` for callers that need only the store and where each object came from."""
    loaded = load(paths, store, namespace=namespace)
    return loaded.store, loaded.where
