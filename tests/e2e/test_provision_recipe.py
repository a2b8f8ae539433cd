"""The build recipe of provision.py: the null-check patch fails loudly, and an old cache is rebuilt.

No API server here: these read and write only text and temporary files, so they run in
milliseconds; they sit with the suite whose binary they are about.
"""

from __future__ import annotations

import json
from pathlib import Path

import provision
import pytest

BEFORE = provision.NULL_CHECK_BEFORE
AFTER = provision.NULL_CHECK_AFTER


def go_file(*body: str, imports: tuple[str, ...] = ('"reflect"', '"strings"')) -> str:
    block = "".join(f"\t{name}\n" for name in imports)
    return (
        f"package validate\n\nimport (\n{block})\n\nfunc f(data interface{{}}) {{\n"
        + "".join(f"\t{line}\n" for line in body)
        + "}\n"
    )


def test_the_null_check_becomes_a_nil_check_and_other_reflect_uses_keep_the_import() -> None:
    source = go_file(BEFORE, "}", "_ = reflect.ValueOf(data)", "_ = strings.TrimSpace")
    patched = provision.replace_null_check(source, "type.go")
    assert f"\t{AFTER}\n" in patched
    assert BEFORE not in patched
    assert '\t"reflect"\n' in patched


def test_reflect_is_dropped_with_its_last_use_so_that_go_still_compiles() -> None:
    source = go_file(BEFORE, "}", "// reflect.DeepEqual used to be here", "_ = strings.TrimSpace")
    patched = provision.replace_null_check(source, "type.go")
    assert '"reflect"' not in patched
    assert '\t"strings"\n' in patched


@pytest.mark.parametrize("times", [0, 2])
def test_a_null_check_not_found_exactly_once_stops_the_build_naming_the_file(times: int) -> None:
    source = go_file(*([BEFORE, "}"] * times), "_ = reflect.ValueOf(data)")
    with pytest.raises(provision.ProvisionError, match=r"^vendor/x/type\.go: .* found it"):
        provision.replace_null_check(source, "vendor/x/type.go")


def test_a_missing_validator_file_stops_the_build_naming_it(tmp_path: Path) -> None:
    with pytest.raises(provision.ProvisionError, match=provision.NULL_CHECK_FILES[0]):
        provision.patch_null_check(tmp_path)


@pytest.mark.parametrize(
    ("marker", "reused"),
    [
        ({"version": "v1.20.2"}, False),  # built before recipes were recorded: without the patch
        ({"version": "v1.20.2", "recipe": provision.BUILD_RECIPE - 1}, False),
        ({"version": "v1.20.2", "recipe": provision.BUILD_RECIPE}, True),
    ],
)
def test_a_cached_binary_is_reused_only_when_this_recipe_built_it(
    tmp_path: Path, marker: dict[str, object], reused: bool
) -> None:
    binary = tmp_path / "kube-apiserver"
    binary.write_bytes(b"\x7fELF")
    path = tmp_path / "COMPLETE.json"
    path.write_text(json.dumps(marker))
    assert provision.built_by_this_recipe(path, binary) is reused


def test_a_broken_marker_means_a_rebuild(tmp_path: Path) -> None:
    binary = tmp_path / "kube-apiserver"
    binary.write_bytes(b"\x7fELF")
    path = tmp_path / "COMPLETE.json"
    path.write_text("{not json")
    assert not provision.built_by_this_recipe(path, binary)
