"""Every value of a real object, replaced by a value of another JSON type, gets an answer.

Why this exists: the image runs the core compiled (docs/architecture.md, *The compiled core*),
and compiled code checks declared types at run time. A user's value that meets a declared type
it does not have raises `TypeError` there, where Python might have carried it along: a 500, and
on the validating webhook (failure policy `Fail`) a denial nobody earned, the worst bug this
product can have. The fuzzer (`tests/fuzz/run_fuzz.py`) looks for such places at random; this
walks them all, one value at a time: every value of every vendor's published policy
(`tests/realworld/cases.yaml`, against its state) and of every object of the example cluster,
replaced by each value of another type below, sent as a CREATE and as an UPDATE through the
webhook's two entry points and the codec, as `/validate` and `/mutate` would. Each answer must
be well-formed, as `tests/fixtures/answers.py` checks every answer to bad input. `make test` runs it against the Python core and, in
`make test-compiled`, against the compiled one.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from tests.fixtures import answers
from tests.fixtures.budget import PROFILE
from tests.fixtures.https import review_of
from tests.fixtures.paths import EXAMPLES, REALWORLD
from webhook.core.model import kinds, scopes
from webhook.core.model.settings import Settings
from webhook.core.state.store import Store
from webhook.core.state.trim import trim
from webhook.shell.cli.manifests import load_store, read_paths

# One of each JSON type; a value is replaced by each whose type differs from its own.
OTHERS: tuple[Any, ...] = (None, True, 7, 2.5, "x", ["x"], {"x": "y"})
# In the fast loop (`make check`), every fifth value of each object; all of them in `make test`.
STRIDE = 1 if PROFILE == "ci" else 5
SETTINGS = Settings()


def paths_of(node: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """The path and value of every value under `node`, its members' and items' included."""
    children = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for key, child in children:
        yield (*at, key), child
        yield from paths_of(child, (*at, key))


def replaced(obj: Mapping[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    copied = copy.deepcopy(dict(obj))
    parent: Any = copied
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return copied


def body_of(flipped: dict[str, Any], sent: dict[str, Any], operation: str) -> bytes:
    """The review the API server would send for `sent` (its envelope: kind, name, namespace,
    from the resource the request went to), carrying `flipped` as the object; an UPDATE's old
    object is `sent` as it was."""
    review = review_of(sent, operation=operation, old=sent if operation == "UPDATE" else None)
    review["request"]["object"] = flipped
    return json.dumps(review).encode()


def answered(body: bytes, view: Store) -> None:
    """Both endpoints answer, well-formed (`tests.fixtures.answers`), never HTTP 400: the
    envelope is the API server's, only the object's values are wrong."""
    assert answers.answered(body, view, SETTINGS) is not None


def every_flip(obj: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for index, (path, value) in enumerate(paths_of(obj)):
        if index % STRIDE:
            continue
        for other in OTHERS:
            if type(other) is not type(value):
                yield f"{'.'.join(map(str, path))}={json.dumps(other)}", replaced(obj, path, other)


def realworld_state() -> Store:
    return load_store([str(REALWORLD / "crds"), str(REALWORLD / "state.yaml")])[0]


def example_state() -> Store:
    return load_store([str(EXAMPLES / "cluster")])[0]


def realworld_policies(state: Store) -> list[tuple[str, dict[str, Any]]]:
    """Each vendor policy as `kubectl apply -n <its namespace>` would send it."""
    import yaml

    cluster_scoped = scopes.cluster_scoped_kinds(state.objects(kinds.CRD))
    cases = yaml.safe_load((REALWORLD / "cases.yaml").read_text(encoding="utf-8"))
    return [
        (
            case["name"],
            dict(
                scopes.as_applied(
                    case["policy"],
                    namespace=case.get("namespace", "default"),
                    cluster_scoped=cluster_scoped,
                )
            ),
        )
        for case in cases
    ]


def example_objects() -> list[tuple[str, dict[str, Any]]]:
    return [
        (
            f"{located.obj.get('kind')}/{located.obj.get('metadata', {}).get('name')}",
            dict(located.obj),
        )
        for located in read_paths([str(EXAMPLES / "cluster")])
        if located.obj.get("kind") != "CustomResourceDefinition"
    ]


# Read once, when the tests are collected: the states the subjects are admitted against.
STATES = {"realworld": realworld_state(), "examples": example_state()}
EXAMPLE_OBJECTS = [pytest.param(obj, id=name) for name, obj in example_objects()]
SUBJECTS = [
    pytest.param("realworld", policy, id=f"vendor:{name}")
    for name, policy in realworld_policies(STATES["realworld"])
] + [pytest.param("examples", *param.values, id=f"example:{param.id}") for param in EXAMPLE_OBJECTS]


def flips_answered(obj: dict[str, Any], view: Store) -> int:
    tried = 0
    for flipped_at, flipped in every_flip(obj):
        for operation in ("CREATE", "UPDATE"):
            try:
                answered(body_of(flipped, obj, operation), view)
            except Exception as exc:
                raise AssertionError(f"{flipped_at} ({operation})") from exc
            tried += 1
    return tried


@pytest.mark.parametrize(("state", "obj"), SUBJECTS)
def test_every_value_flipped_is_answered(state: str, obj: dict[str, Any]) -> None:
    assert flips_answered(obj, STATES[state]) > 0


# Reviews answered against a state holding the flipped object: a route's annotation (/mutate)
# and a policy's impact on what it targets (/validate) read every kind the examples hold.
READERS = ("create-route.json", "create-good-policy.json")


@pytest.mark.parametrize("obj", EXAMPLE_OBJECTS)
def test_every_value_of_a_stored_example_object_flipped_is_read_without_an_exception(
    obj: dict[str, Any],
) -> None:
    """As an informer stores what a watch sent (`trim`, then `upsert`), with the rest of the
    example cluster; then reviews whose answers read it. The object is put back after each."""
    store = example_state()  # its own: this test writes to it
    keep = SETTINGS.annotation_key
    bodies = [(EXAMPLES / "reviews" / review).read_bytes() for review in READERS]
    tried = 0
    for flipped_at, flipped in every_flip(obj):
        try:
            store.upsert(trim(flipped, keep_annotation=keep, parts=store.parts))
            for body in bodies:
                answered(body, store)
        except Exception as exc:
            raise AssertionError(flipped_at) from exc
        finally:
            store.upsert(trim(obj, keep_annotation=keep, parts=store.parts))
        tried += 1
    assert tried > 0
