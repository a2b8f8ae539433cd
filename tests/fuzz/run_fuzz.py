"""Fuzz the pure admission path: codec, rules, engine and mutate, for a given time.

    python tests/fuzz/run_fuzz.py --seconds 60 [--seed N] [--save DIR]

Inputs are the example reviews (`examples/reviews/*.json`) and every example cluster object
wrapped in a review, mutated at random: types flipped, keys dropped or duplicated, values
nested, lists repeated, strings blown up, bytes truncated, flipped or made invalid UTF-8. Each
input goes through `decode_review`, then `validate` + `from_verdict` and `mutate` + `patched`,
against the example cluster; every answer must encode to well-formed JSON echoing the uid
(SPEC §2.5-2.7). Anything else — an exception, a malformed answer — is counted as an error,
and with `--save` the input is written out to replay. Exit status 1 when there was any.

Not collected by pytest (no `test_` prefix): it runs for as long as it is told to.
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import random
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from webhook.core.admission import mutation, reviews  # noqa: E402
from webhook.core.admission import validation as admission  # noqa: E402
from webhook.core.model.settings import Settings  # noqa: E402
from webhook.core.rules.findings import MAX_WARNING_LINE, MAX_WARNINGS  # noqa: E402
from webhook.shell.cli import manifests  # noqa: E402
from webhook.shell.process import build  # noqa: E402

EXAMPLES = ROOT / "examples"
MAX_BODY = 7 * 1024 * 1024  # what the server reads (webhook.shell.https.endpoints.MAX_BODY_BYTES)
SETTINGS = Settings()
STORE = manifests.load_store([str(EXAMPLES / "cluster")])[0]


# --- seeds -------------------------------------------------------------------------------------


def review_of(obj: dict[str, Any], operation: str) -> dict[str, Any]:
    group, _, version = str(obj.get("apiVersion", "v1")).rpartition("/")
    metadata = obj.get("metadata") or {}
    request: dict[str, Any] = {
        "uid": f"fuzz-{metadata.get('name', 'x')}",
        "kind": {"group": group, "version": version, "kind": obj.get("kind", "")},
        "resource": {"group": group, "version": version, "resource": "things"},
        "name": metadata.get("name", ""),
        "namespace": metadata.get("namespace", ""),
        "operation": operation,
        "object": None if operation == "DELETE" else obj,
        "oldObject": obj if operation != "CREATE" else None,
    }
    return {"apiVersion": reviews.API_VERSION, "kind": reviews.KIND, "request": request}


def load_seeds() -> list[dict[str, Any]]:
    seeds = [json.loads(p.read_text()) for p in sorted((EXAMPLES / "reviews").glob("*.json"))]
    for located in manifests.read_paths([str(EXAMPLES / "cluster"), str(EXAMPLES / "broken")]):
        if located.obj.get("kind") != "CustomResourceDefinition":
            seeds += [review_of(dict(located.obj), op) for op in ("CREATE", "UPDATE", "DELETE")]
    return seeds


# --- mutations of a decoded review -------------------------------------------------------------

KEYS = [
    "spec", "targetRef", "targetRefs", "group", "kind", "name", "namespace", "sectionName",
    "default", "override", "defaults", "overrides", "metadata", "annotations", "labels",
    "deletionTimestamp", "parentRefs", "listeners", "rules", "backendRefs", "uid", "operation",
    "object", "oldObject", "subResource", "maxRetries", "perStatus", "code",
]  # fmt: skip
STRINGS = [
    "",
    "a",
    "a/b",
    "Gateway",
    "HTTPRoute",
    "apps",
    "infra",
    "gw",
    "\n",
    "é",
    "\ud800",
    "\x00",
]


def size(rng: random.Random, largest: int) -> int:
    """Mostly small, sometimes large, rarely `largest`: big inputs are slow to make and read."""
    return rng.choices([1, 2, 17, largest // 100, largest], weights=[50, 20, 20, 8, 2])[0]


def random_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.5:
        return rng.choice(
            [
                None,
                True,
                False,
                0,
                -1,
                2**63,
                1.5,
                rng.choice(STRINGS),
                rng.choice(KEYS),
                rng.choice(STRINGS) * size(rng, 100_000),
            ]
        )
    if roll < 0.75:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {
        rng.choice(KEYS + STRINGS): random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))
    }


def slots(node: Any) -> list[tuple[Any, Any]]:
    out: list[tuple[Any, Any]] = []
    stack = [node]
    while stack:
        current = stack.pop()
        pairs = (
            list(current.items())
            if isinstance(current, dict)
            else list(enumerate(current))
            if isinstance(current, list)
            else []
        )
        for key, child in pairs:
            out.append((current, key))
            stack.append(child)
    return out


def flip(value: Any) -> Any:
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list):
        return {str(i): v for i, v in enumerate(value)}
    if isinstance(value, str):
        return len(value)
    if value is None:
        return {}
    return str(value)


def nest(rng: random.Random, value: Any) -> Any:
    for _ in range(rng.choice([1, 5, 70, 500, 900])):
        value = [value] if rng.random() < 0.5 else {rng.choice(KEYS): value}
    return value


def repeat(rng: random.Random, value: Any) -> list[Any]:
    """The value many times over, but no more than fits a body the server would read."""
    try:
        one = len(json.dumps(value)) + 2
    except (RecursionError, ValueError):
        one = MAX_BODY
    count = max(2, min(size(rng, 20_000), MAX_BODY // one))
    # Copies, not references: a later mutation inside one must not land in all of them at once.
    try:
        return [value] + [copy.deepcopy(value) for _ in range(count - 1)]
    except RecursionError:
        return [value, value]


MUTATIONS: dict[str, Callable[[random.Random, Any, Any], None]] = {
    "replace": lambda rng, c, k: c.__setitem__(k, random_value(rng)),
    "flip": lambda rng, c, k: c.__setitem__(k, flip(c[k])),
    "drop": lambda rng, c, k: c.__delitem__(k),
    "nest": lambda rng, c, k: c.__setitem__(k, nest(rng, c[k])),
    "repeat": lambda rng, c, k: c.__setitem__(k, repeat(rng, c[k])),
    "big": lambda rng, c, k: c.__setitem__(k, rng.choice(STRINGS) * size(rng, 5_000_000)),
    "add": lambda rng, c, k: (
        c[k].__setitem__(rng.choice(KEYS), random_value(rng)) if isinstance(c[k], dict) else None
    ),
}


def mutate_tree(rng: random.Random, review: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    review = copy.deepcopy(review)
    # Mostly inside the object, where user input lives; sometimes anywhere in the envelope.
    request = review.get("request") if isinstance(review.get("request"), dict) else None
    inside = request.get("object") if request and rng.random() < 0.7 else None
    root = inside if isinstance(inside, dict) else review
    done = []
    for _ in range(rng.randint(1, 4)):
        targets = slots(root)
        if not targets:
            break
        container, key = rng.choice(targets)
        name = rng.choice(list(MUTATIONS))
        MUTATIONS[name](rng, container, key)
        done.append(f"{name}@{key!r}"[:60])
    return review, done


# --- mutations of the bytes --------------------------------------------------------------------


def mutate_bytes(rng: random.Random, body: bytes) -> tuple[bytes, str]:
    choice = rng.randrange(7)
    if not body:
        return b"{", "empty"
    at = rng.randrange(len(body))
    if choice == 0:
        return body[:at], f"truncate@{at}"
    if choice == 1:
        flipped = bytes([body[at] ^ (1 << rng.randrange(8))])
        return body[:at] + flipped + body[at + 1 :], f"bitflip@{at}"
    if choice == 2:
        bad = rng.choice([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe9", b"\x00", b"\\ud800"])
        return body[:at] + bad + body[at:], f"invalid-utf8@{at}"
    if choice == 3:  # a duplicate key: the same member again, with another value
        text = body.decode("utf-8", "replace")
        brace = text.find("{", at)
        if brace < 0:
            return body, "noop"
        dup = f'"{rng.choice(KEYS)}":{json.dumps(random_value(rng))},'
        return (text[: brace + 1] + dup + text[brace + 1 :]).encode(), f"duplicate-key@{brace}"
    if choice == 4:
        return body[:at] + rng.choice([b"NaN", b"-Infinity", b"9" * 5000, b"1e999"]) + body[
            at:
        ], "constant"
    if choice == 5:
        depth = rng.choice([100, 1_000, 50_000])
        return body[:at] + b"[" * depth + b"]" * depth + body[at:], f"brackets@{at}x{depth}"
    other = rng.randrange(len(body))
    lo, hi = sorted((at, other))
    return body[:lo] + body[hi:], f"cut[{lo}:{hi}]"


# --- the check -----------------------------------------------------------------------------------


class Malformed(AssertionError):
    """An answer the API server could not use."""


def check(encoded: bytes, uid: str) -> None:
    def refuse(name: str) -> None:
        raise Malformed(f"{name} in the answer")

    response = json.loads(encoded.decode("utf-8"), parse_constant=refuse)["response"]
    if response.get("uid") != uid or not isinstance(response.get("allowed"), bool):
        raise Malformed("uid not echoed, or no allowed")
    warnings = response.get("warnings", [])
    if len(warnings) > MAX_WARNINGS or any(
        not isinstance(w, str) or not w.isprintable() or len(w) > MAX_WARNING_LINE for w in warnings
    ):
        raise Malformed(f"bad warnings: {str(warnings)[:200]}")
    if not response["allowed"]:
        causes = response["status"]["details"]["causes"]
        if not causes or any(
            set(c) != {"type", "field", "message"}
            or not all(isinstance(v, str) for v in c.values())
            for c in causes
        ):
            raise Malformed(f"bad causes: {str(causes)[:200]}")
    if "patch" in response:
        json.loads(base64.b64decode(response["patch"]))


def run_one(body: bytes) -> tuple[str, float]:
    """`malformed` (HTTP 400) or the verdict, and the seconds spent past `json.loads`.

    Raises on any failure of the contract.
    """
    try:
        request = reviews.decode_review(body)
    except reviews.MalformedReview:
        return "malformed", 0.0
    started = time.perf_counter()
    uid = request["uid"]
    verdict = admission.validate(request, view=STORE, settings=SETTINGS)
    validated = reviews.encode_review(reviews.from_verdict(uid, verdict, request=request))
    operations = mutation.mutate(request, view=STORE, settings=SETTINGS)
    mutated = reviews.encode_review(reviews.patched(uid, operations))
    took = time.perf_counter() - started
    check(validated, uid)
    check(mutated, uid)
    return ("allowed" if verdict.allowed else "denied"), took


@dataclass
class Slowest:
    seconds: float = 0.0
    what: str = ""
    body: bytes = b""

    def offer(self, seconds: float, what: str, body: bytes) -> None:
        if seconds > self.seconds:
            self.seconds, self.what, self.body = seconds, what, body

    def __str__(self) -> str:
        return f"{self.seconds * 1000:.1f} ms ({self.what})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to run (default 60)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: time)")
    parser.add_argument(
        "--save", type=Path, default=None, help="write failing inputs (and the slowest) here"
    )
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else time.time_ns() % 2**32
    rng = random.Random(seed)
    seeds = load_seeds()
    outcomes: dict[str, int] = {}
    errors: list[tuple[str, str, bytes]] = []
    slowest, slowest_core = Slowest(), Slowest()
    times: list[float] = []
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        review, how = (
            mutate_tree(rng, rng.choice(seeds)) if rng.random() < 0.8 else (rng.choice(seeds), [])
        )
        try:
            body = json.dumps(review).encode("utf-8", "surrogatepass")
        except RecursionError:
            continue  # nested past what json.dumps can write: the byte mutations cover it
        if rng.random() < 0.35:
            body, what = mutate_bytes(rng, body)
            how.append(what)
        if len(body) > MAX_BODY:
            continue  # answered 413 before it is read
        what = f"{len(body)} bytes, {' '.join(how) or 'unmutated'}"
        started = time.perf_counter()
        try:
            outcome, core = run_one(body)
        except Exception as exc:
            outcome, core = "error", 0.0
            errors.append((f"{type(exc).__name__}: {exc}"[:300], traceback.format_exc(), body))
        times.append(time.perf_counter() - started)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        slowest.offer(times[-1], what, body)
        slowest_core.offer(core, what, body)
    times.sort()
    tried = len(times)
    print(f"seed {seed}, {args.seconds:g} s, core {build.core_build()}")
    print(f"inputs tried: {tried}  ({', '.join(f'{k} {v}' for k, v in sorted(outcomes.items()))})")
    print(f"errors: {len(errors)}")
    if times:
        p50, p99 = times[tried // 2], times[min(tried - 1, tried * 99 // 100)]
        print(f"time per input: median {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms")
    print(f"slowest input: {slowest}")
    print(f"slowest past json.loads (rules, engine, mutate, encode): {slowest_core}")
    for i, (summary, trace, _) in enumerate(errors[:5]):
        print(f"\n--- error {i + 1}: {summary}\n{trace}")
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
        (args.save / "slowest.json").write_bytes(slowest.body)
        (args.save / "slowest-past-decode.json").write_bytes(slowest_core.body)
        for i, (_, _, body) in enumerate(errors):
            (args.save / f"error-{i:04d}.json").write_bytes(body)
        print(f"failing inputs and the slowest written to {args.save}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
