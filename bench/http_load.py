"""Part 1, HTTP: /validate and /mutate under load, against a no-op endpoint in the same run.

Three processes: the webhook (`bench.servers webhook`, on a synthetic cluster), the no-op
(`bench.servers noop`), and the load generator of each measurement (wrk when installed, else
`bench.loadgen`). Every measurement of ours is paired with one of the no-op on the same bodies,
right before or after it (the order flips every round), and the claim is the median over rounds
of the per-round ratio: what the machine's noise does to one, it mostly does to the other.

- Saturation: a closed loop of `connections` keep-alive connections for `seconds`; requests/s,
  and each server's CPU time per request (user + system, from `/proc`), the webhook's split into
  the core's (its admission decisions, `GET /bench/cpu`) and the serving stack's (the rest).
  CPU time is what a busy neighbour inflates least: the ratio of CPU per request is what the
  throughput ratio would be on a quiet machine where both servers are CPU-bound.
- Fixed rate: `bench.loadgen --rate` (open loop, latency from the due time); p50 and p99.

Mixes: `validate`, `validate_light` and `mutate` as in `bench.traffic`, and the diagnostic
`validate_denied` (only the broken policies: the core denies them in tens of microseconds, so
what is left is the serving stack), measured at saturation only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from bench import snapshot, synth, traffic
from webhook.shell.https.tls import self_signed

# Where the uvloop alternative is measured: the mixes where the serving stack is a visible part
# of the cost (on the full /validate mix the core's impact previews are nearly all of it).
UVLOOP_MIXES = ("validate_light", "mutate")
ENDPOINTS = {
    "validate": "/validate",
    "validate_light": "/validate",
    "validate_denied": "/validate",
    "mutate": "/mutate",
}
RATE_MIXES = ("validate", "validate_light", "mutate")  # the diagnostic mix: saturation only


@dataclass(frozen=True, slots=True)
class HttpConfig:
    scale: float = 0.1  # the webhook's state: this fraction of the default synthetic cluster
    seed: int = 1
    rounds: int = 3
    saturation_seconds: float = 5.0
    connections: int = 16
    rate: float = 500.0
    rate_seconds: float = 8.0
    distinct_bodies: int = 400
    warmup_seconds: float = 2.0
    loop: str = "asyncio"  # the servers' event loop (the product runs on asyncio's own)
    # A third server: the webhook on uvloop, measured at saturation in every round, to put a
    # number on what switching the event loop would gain (a proposal; the product is unchanged).
    compare_uvloop: bool = True
    # Once, at the end: the no-op at saturation driven by bench.loadgen instead of wrk, to show
    # why the saturation runs use wrk (a Python client saturates before the server does).
    compare_loadgen: bool = True


def run(config: HttpConfig, *, log: Any = print) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-http-"))
    servers: dict[str, subprocess.Popen[str]] = {}
    try:
        certs = self_signed(work / "certs")
        bodies = _write_bodies(config, work)
        names = ["noop", "webhook"] + (["webhook_uvloop"] if config.compare_uvloop else [])
        for name in names:
            servers[name] = _start(name, config, work)
        ready = {name: _ready(proc, name) for name, proc in servers.items()}
        ports = {name: int(fields[0]) for name, fields in ready.items()}
        urls = {name: f"https://127.0.0.1:{port}" for name, port in ports.items()}
        procs = list(servers.values())
        ca = str(certs.ca_file)
        sanity = asyncio.run(_sanity(urls, bodies, ca))
        log(f"  sanity: {json.dumps(sanity)}")
        endpoints = ENDPOINTS
        tool = "wrk" if shutil.which("wrk") else "bench.loadgen"
        if tool != "wrk":
            log(
                "  note: wrk not found (apt-get install wrk): saturation is driven by the Python"
                " load generator, which saturates first; the no-op's CPU per request is not"
                " measured, so the page's readings of what is not met are left out"
            )
        for mix, path in endpoints.items():  # warm the servers on every mix (code paths, TLS)
            for server in names:
                url = urls[server] + path
                _saturate(tool, url, bodies[mix], ca, config, config.warmup_seconds)
                wait_idle(procs)
        rounds: list[dict[str, Any]] = []
        for r in range(config.rounds):
            order = ("noop", "webhook") if r % 2 == 0 else ("webhook", "noop")
            row: dict[str, Any] = {"round": r, "order": list(order)}
            idle = 0.0
            for mix, path in endpoints.items():
                here = list(order)
                if config.compare_uvloop and mix in UVLOOP_MIXES:
                    here.append("webhook_uvloop")
                for server in here:
                    before = _cpu(server, servers[server], urls[server], ca)
                    url = urls[server] + path
                    sat = _saturate(tool, url, bodies[mix], ca, config, config.saturation_seconds)
                    idle += wait_idle(procs)  # the backlog's CPU time belongs to this run too
                    after = _cpu(server, servers[server], urls[server], ca)
                    row[f"sat_{server}_{mix}"] = sat | _cpu_per_request(before, after, sat)
            for mix in RATE_MIXES:
                path = endpoints[mix]
                for server in order:
                    row[f"rate_{server}_{mix}"] = _rate(
                        urls[server] + path, bodies[mix], ca, config
                    )
                    idle += wait_idle(procs)
            row["idle_wait_s"] = idle
            rounds.append(row)
            log(f"  round {r + 1}/{config.rounds}: " + _round_line(row, endpoints))
        result: dict[str, Any] = {
            "config": dataclasses.asdict(config),
            "tool": tool,
            "sanity": sanity,
            # Which build of the core the webhook served with (`bench` checks it).
            "core": dict(f.split("=", 1) for f in ready["webhook"][1:] if "=" in f).get("core"),
        }
        result.update(_summarize(rounds, endpoints, config))
        if config.compare_loadgen and tool == "wrk":
            args = [
                "--closed",
                str(config.connections),
                "--duration",
                str(config.saturation_seconds),
            ]
            python_client = _loadgen(urls["noop"] + "/validate", bodies["validate"], ca, args)
            result["http_noop_validate_rps_python_client"] = python_client["rps"]
            result["http_wrk_gain_over_python_client"] = (
                result["http_noop_validate_rps"] / python_client["rps"]
            )
        result["rounds"] = rounds
        return result
    finally:
        for proc in servers.values():
            proc.terminate()
        for proc in servers.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(work, ignore_errors=True)


def _write_bodies(config: HttpConfig, work: Path) -> dict[str, Path]:
    cluster = synth.generate(synth.Shape().scaled(config.scale), seed=config.seed)
    validate = traffic.validate_reviews(cluster, config.distinct_bodies)
    light = [(c, r) for c, r in validate if c not in traffic.HEAVY]
    denied = [(c, r) for c, r in validate if c.startswith("broken-")]
    mutate = traffic.mutate_reviews(cluster, config.distinct_bodies)
    mixes = {"validate": validate, "validate_light": light, "validate_denied": denied}
    out = {}
    for name, reviews in (*mixes.items(), ("mutate", mutate)):
        path = work / f"{name}.jsonl"
        path.write_text(traffic.as_json_lines(reviews), encoding="utf-8")
        out[name] = path
    return out


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux `/proc/<pid>/stat`)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu(server: str, proc: subprocess.Popen[str], url: str, ca: str) -> dict[str, float]:
    """A server's CPU seconds so far; for the webhook, also those of its core (`/bench/cpu`)."""
    out = {"cpu_s": _cpu_seconds(proc.pid)}
    if server.startswith("webhook"):
        context = ssl.create_default_context(cafile=ca)
        with urllib.request.urlopen(f"{url}/bench/cpu", context=context, timeout=30) as answer:
            out.update(json.load(answer))
    return out


def _cpu_per_request(
    before: dict[str, float], after: dict[str, float], measured: dict[str, Any]
) -> dict[str, float]:
    """CPU milliseconds per request: the server's, and for the webhook its core's and the rest.

    The webhook counts what it answered (requests still in flight when the load generator
    stopped are answered, and paid for, after it); for the no-op, wrk's count (NaN without wrk:
    `bench.loadgen` counts only the answers after its warm-up, which the CPU time includes)."""
    requests = after.get("core_calls", 0) - before.get("core_calls", 0) or measured.get("requests")

    def per_request(key: str) -> float:
        return (after[key] - before[key]) * 1000 / requests if requests else math.nan

    out = {"cpu_ms": per_request("cpu_s")}
    if "core_cpu_s" in after:
        out["core_ms"] = per_request("core_cpu_s")
        out["stack_ms"] = out["cpu_ms"] - out["core_ms"]
    return out


def wait_idle(procs: list[subprocess.Popen[str]], *, timeout: float = 180.0) -> float:
    """Wait until no server burns CPU: a server stays busy with the requests it has already read
    after the load generator stops (aiohttp does not cancel handlers when clients leave), and
    that backlog must not run during the next measurement. Returns the seconds waited."""
    started = time.perf_counter()
    if not Path("/proc/self/stat").exists():
        time.sleep(2.0)
        return time.perf_counter() - started
    while time.perf_counter() - started < timeout:
        before = [_cpu_seconds(p.pid) for p in procs]
        time.sleep(0.3)
        after = [_cpu_seconds(p.pid) for p in procs]
        if all(b - a < 0.03 for a, b in zip(before, after, strict=True)):
            break
    return time.perf_counter() - started


def _start(name: str, config: HttpConfig, work: Path) -> subprocess.Popen[str]:
    which, _, loop = name.partition("_")
    cmd = [sys.executable, "-m", "bench.servers", which, "--cert-dir", str(work / "certs")]
    cmd += ["--scale", str(config.scale), "--seed", str(config.seed), "--loop", loop or config.loop]
    log_file = open(work / f"{name}.log", "w", encoding="utf-8")  # noqa: SIM115 - the child owns it
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=log_file,
        text=True,
        cwd=snapshot.code_root(),
        env=snapshot.env(),
    )


def _ready(proc: subprocess.Popen[str], name: str) -> list[str]:
    """The fields of the server's READY line (`bench.servers`): its port first."""
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until READY, or EOF if the server died
    if not line.startswith("READY"):
        raise RuntimeError(f"{name} server did not start (exit {proc.poll()}): {line!r}")
    return line.split()[1:]


async def _sanity(urls: dict[str, str], bodies: dict[str, Path], ca: str) -> dict[str, Any]:
    """The first reviews of each mix, once, to both servers: every answer is a well-formed
    AdmissionReview echoing the uid, and ours says what the mix means (some denied, patched)."""
    context = ssl.create_default_context(cafile=ca)
    out: dict[str, Any] = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        for mix, path in (("validate", bodies["validate"]), ("mutate", bodies["mutate"])):
            lines = path.read_text(encoding="utf-8").splitlines()[:40]
            counts = {"ok": 0, "denied": 0, "patched": 0, "bad": 0}
            for server in ("noop", "webhook"):
                for line in lines:
                    uid = json.loads(line)["request"]["uid"]
                    async with session.post(f"{urls[server]}/{mix}", data=line) as resp:
                        answer = await resp.json() if resp.status == 200 else {}
                    response = answer.get("response", {})
                    if response.get("uid") != uid:
                        counts["bad"] += 1
                    elif server == "webhook":
                        counts["ok"] += 1
                        counts["denied"] += not response.get("allowed", False)
                        counts["patched"] += "patch" in response
            out[mix] = counts
    if any(c["bad"] for c in out.values()):
        raise RuntimeError(f"HTTP benchmark sanity check failed: {out}")
    return out


def _saturate(
    tool: str, url: str, bodies: Path, ca: str, config: HttpConfig, seconds: float
) -> dict[str, Any]:
    if tool == "wrk":
        secs = max(1, round(seconds))
        cmd = [
            "wrk",
            "-t1",
            f"-c{config.connections}",
            f"-d{secs}s",
            "--timeout",
            "60s",
            "-s",
            str(snapshot.code_root() / "bench" / "wrk.lua"),
            url,
        ]
        done = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            env={**snapshot.env(), "BENCH_BODIES": str(bodies)},
            check=True,
        )
        line = next(x for x in done.stdout.splitlines() if x.startswith("BENCH-JSON "))
        result: dict[str, Any] = json.loads(line.removeprefix("BENCH-JSON "))
        result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
        result["errors"] = sum(v for k, v in result.items() if k.startswith("errors_"))
        return result
    args = ["--closed", str(config.connections), "--duration", str(seconds), "--warmup", "0.5"]
    return _loadgen(url, bodies, ca, args)


def _rate(url: str, bodies: Path, ca: str, config: HttpConfig) -> dict[str, Any]:
    warmup = min(1.0, config.rate_seconds / 4)
    args = [
        "--rate",
        str(config.rate),
        "--duration",
        str(config.rate_seconds),
        "--warmup",
        str(warmup),
    ]
    args += ["--grace", str(min(2.0, config.rate_seconds))]
    return _loadgen(url, bodies, ca, [*args, "--connections", "64"])


def _loadgen(url: str, bodies: Path, ca: str, args: list[str]) -> dict[str, Any]:
    cmd = ["-m", "bench.loadgen", url, "--bodies", str(bodies), "--ca", ca, *args]
    return snapshot.json_of(cmd, quiet=True)


def _round_line(row: dict[str, Any], endpoints: dict[str, str]) -> str:
    parts = []
    for mix in endpoints:
        ours, noop = row[f"sat_webhook_{mix}"], row[f"sat_noop_{mix}"]
        part = (
            f"{mix} {ours['rps']:.0f}/{noop['rps']:.0f} rps, CPU {ours['cpu_ms']:.3f} "
            f"(core {ours['core_ms']:.3f} + stack {ours['stack_ms']:.3f})/{noop['cpu_ms']:.3f} ms"
        )
        if mix in RATE_MIXES:
            p99, p99_noop = row[f"rate_webhook_{mix}"]["p99_ms"], row[f"rate_noop_{mix}"]["p99_ms"]
            part += f", p99 {p99:.1f}/{p99_noop:.1f} ms"
        parts.append(part)
    return "; ".join(parts) + f" (waited {row['idle_wait_s']:.0f} s for idle servers)"


def _summarize(
    rounds: list[dict[str, Any]], endpoints: dict[str, str], config: HttpConfig
) -> dict[str, float]:
    """Flat figures: medians over rounds, and the median of the per-round ratios (the claim)."""
    out: dict[str, float] = {
        "http_state_scale": config.scale,
        "http_rounds": len(rounds),
        "http_connections": config.connections,
        "http_offered_rps": config.rate,
    }
    med = statistics.median
    for mix in endpoints:
        sat = [(r[f"sat_webhook_{mix}"]["rps"], r[f"sat_noop_{mix}"]["rps"]) for r in rounds]
        ratios = [ours / noop for ours, noop in sat]
        out[f"http_{mix}_rps"] = med(o for o, _ in sat)
        out[f"http_noop_{mix}_rps"] = med(n for _, n in sat)
        out[f"http_{mix}_throughput_ratio"] = med(ratios)
        out[f"http_{mix}_throughput_ratio_min"] = min(ratios)
        out[f"http_{mix}_throughput_ratio_max"] = max(ratios)
        cpu = [(r[f"sat_webhook_{mix}"], r[f"sat_noop_{mix}"]) for r in rounds]
        for what in ("cpu_ms", "core_ms", "stack_ms"):
            out[f"http_{mix}_{what}_per_request"] = med(o[what] for o, _ in cpu)
        out[f"http_noop_{mix}_cpu_ms_per_request"] = med(n["cpu_ms"] for _, n in cpu)
        out[f"http_{mix}_cpu_ratio"] = med(n["cpu_ms"] / o["cpu_ms"] for o, n in cpu)
        if mix not in RATE_MIXES:
            continue
        rate = [(r[f"rate_webhook_{mix}"], r[f"rate_noop_{mix}"]) for r in rounds]
        for q in ("p50", "p99"):
            out[f"http_{mix}_{q}_ms"] = med(o[f"{q}_ms"] for o, _ in rate)
            out[f"http_noop_{mix}_{q}_ms"] = med(n[f"{q}_ms"] for _, n in rate)
            out[f"http_{mix}_{q}_ratio"] = med(o[f"{q}_ms"] / n[f"{q}_ms"] for o, n in rate)
        out[f"http_{mix}_achieved_rps"] = med(o["rps"] for o, _ in rate)
        out[f"http_{mix}_unfinished"] = sum(o["unfinished"] for o, _ in rate)
        out[f"http_noop_{mix}_achieved_rps"] = med(n["rps"] for _, n in rate)
        if f"sat_webhook_uvloop_{mix}" in rounds[0]:
            gains = [
                r[f"sat_webhook_uvloop_{mix}"]["rps"] / r[f"sat_webhook_{mix}"]["rps"]
                for r in rounds
            ]
            out[f"http_{mix}_uvloop_rps"] = med(
                r[f"sat_webhook_uvloop_{mix}"]["rps"] for r in rounds
            )
            out[f"http_{mix}_uvloop_gain"] = med(gains)
    return out
