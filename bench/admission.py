"""Admission control, deadlines and breakers under saturation, before and after, in ONE run.

Two simulated vLLM replicas (``deja sim``, ``--max-num-seqs`` 16 each, ``--decode-ms`` per
token, every answer ``--max-tokens`` long: about 2 s of engine time) behind two gateways:

- **before**: no back-pressure. With ``--before-ref REF`` the gateway's code at that git ref
  (``git archive``, run from the run's temporary folder); without it this code with admission
  switched off (``DEJA_REPLICA_MAX_INFLIGHT`` = 10^6, deadline 600 s), which is what the issue
  measured (no in-flight limit, no overall deadline).
- **after**: this code with its defaults (the in-flight limit learned from the replicas'
  ``/metrics``) plus ``DEJA_REQUEST_TIMEOUT_SECONDS`` = ``--deadline`` and
  ``DEJA_ADMISSION_QUEUE_SIZE`` = ``--queue``.

Both gateways: semantic layer off (embedding is not what is measured), health/scrape interval
0.5 s; a warm-up burst lets the after gateway learn the replicas' limit (printed).

Scenarios:

a. **burst** (the issue's "80 slow requests"): ``--burst`` concurrent non-streamed requests.
   Per gateway: answers by status, latency p50/p99/max of the 200s and of the refused, and the
   replicas' own peak ``vllm:num_requests_waiting`` (sampled every 50 ms).
b. **overload** (the target): Poisson arrivals at ``--rate`` req/s for ``--seconds`` s, about
   2.5x what the replicas can serve. Target: p99 of admitted requests within the deadline, and
   refused ones failing within 10 ms (client-measured, loopback HTTP included).
c. **half-open** (the issue's breaker finding): two fast replicas both answer 503 once (both
   breakers open), the fault is cleared, and once the cooldown is over ``--burst`` requests
   arrive at once. Before (only with ``--before-ref``): the first request to each replica is its
   probe, the rest are refused at once; after: they wait for the probes and are answered. The
   after gateway keeps the default queue size here (the bound is not what is measured).
d. **cost** (only with ``--before-ref``): what admission, the deadline and the body-read
   watch cost a request that never waits. ``--cost-requests`` sequential forced misses
   (``Cache-Control: no-cache, no-store``, one keep-alive connection) to a replica with no
   simulated delay, alternating before/after in rounds; the gateway's CPU time per request
   (``/proc/<pid>/stat``) and the client's p50.

The replicas are SIMULATED; all times are simulated engine times. The client is this process
(aiohttp). Writes ``bench/results/admission.json``. See bench/README.md.

    .venv/bin/python bench/admission.py [--before-ref REF] [--rate 40] [--seconds 8]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import random
import re
import subprocess
import tarfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from common import (
    LOADGEN_CPU,
    PINNING,
    REPO_ROOT,
    RESULTS_DIR,
    SERVER_CPU,
    BenchError,
    Proc,
    banner,
    cpu_seconds,
    log_dir,
    percentile,
    remove_logs,
    run_guarded,
    run_meta,
    start_gateway,
    start_sim,
    stop_process,
    table,
    verdict,
)

MODEL = "deja-sim-1"
COMMON_ENV = {
    "DEJA_SEMANTIC_ENABLED": "false",
    "DEJA_HEALTH_CHECK_INTERVAL_SECONDS": "0.5",
}
REJECT_TARGET_MS = 10.0


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--before-ref", help="git ref whose gateway code is 'before'")
    p.add_argument("--burst", type=int, default=80, help="concurrent requests in a and c")
    p.add_argument("--rate", type=float, default=40.0, help="arrivals per second in b")
    p.add_argument("--seconds", type=float, default=8.0, help="duration of b's arrivals")
    p.add_argument("--deadline", type=float, default=5.0, help="after: request timeout (s)")
    p.add_argument("--queue", type=int, default=32, help="after: admission queue size")
    p.add_argument("--max-tokens", type=int, default=40, help="tokens per answer")
    p.add_argument("--decode-ms", type=float, default=50.0, help="simulated ms per token")
    p.add_argument("--max-num-seqs", type=int, default=16, help="per simulated replica")
    p.add_argument("--cooldown", type=float, default=1.0, help="breaker cooldown in c (s)")
    p.add_argument("--cost-requests", type=int, default=600, help="per round and gateway in d")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--output", type=Path, default=RESULTS_DIR / "admission.json")
    return p.parse_args()


# --- the gateways ------------------------------------------------------------------------------
def before_source(ref: str) -> Path:
    """The gateway's code at ``ref``, unpacked into the run's temporary folder."""
    archive = subprocess.run(
        ["git", "archive", ref, "app", "middleware", "config", "deja"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        raise BenchError(f"git archive {ref} failed: {archive.stderr.decode()[:300]}")
    target = log_dir() / "before-src"
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(target, filter="data")
    return target


def gateways(args: argparse.Namespace, replicas: list[str], tag: str) -> dict[str, Proc]:
    before_env = {**COMMON_ENV, "PYTHONPATH": str(REPO_ROOT)}
    if args.before_ref:
        before_env["PYTHONPATH"] = str(before_source(args.before_ref))
    else:
        before_env["DEJA_REPLICA_MAX_INFLIGHT"] = "1000000"
    after_env = {
        **COMMON_ENV,
        "PYTHONPATH": str(REPO_ROOT),
        "DEJA_REQUEST_TIMEOUT_SECONDS": str(args.deadline),
        "DEJA_ADMISSION_QUEUE_SIZE": str(args.queue),
    }
    if tag == "c":  # what is measured is the breaker, not the queue's bound
        for env in (before_env, after_env):
            env["DEJA_REPLICA_COOLDOWN_SECONDS"] = str(args.cooldown)
        del after_env["DEJA_ADMISSION_QUEUE_SIZE"]
    started = {"after": start_gateway(f"after-{tag}", replicas, cpu=SERVER_CPU, env=after_env)}
    if tag != "c" or args.before_ref:  # c's before needs the old code: today's cannot opt out
        started["before"] = start_gateway(f"before-{tag}", replicas, cpu=SERVER_CPU, env=before_env)
    return started


# --- the client --------------------------------------------------------------------------------
def payload(max_tokens: int) -> dict[str, Any]:
    question = f"admission bench {uuid.uuid4().hex}"
    messages = [{"role": "user", "content": question}]
    return {"model": MODEL, "messages": messages, "max_tokens": max_tokens}


async def ask(
    http: aiohttp.ClientSession, url: str, max_tokens: int, results: list[dict[str, Any]]
) -> None:
    started = time.perf_counter()
    try:
        async with http.post(url + "/v1/chat/completions", json=payload(max_tokens)) as resp:
            await resp.read()
            status, retry = resp.status, resp.headers.get("retry-after")
    except aiohttp.ClientError as exc:
        status, retry = f"error {type(exc).__name__}", None
    ms = (time.perf_counter() - started) * 1000
    results.append({"status": status, "ms": ms, "retry_after": retry})


@contextlib.asynccontextmanager
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        yield http


async def peak_waiting(sims: list[str], stop: asyncio.Event) -> int:
    """The replicas' summed ``vllm:num_requests_waiting``, at its highest while sampled."""
    peak = 0
    async with aiohttp.ClientSession() as http:
        while not stop.is_set():
            total = 0.0
            for sim in sims:
                async with http.get(sim + "/metrics") as resp:
                    text = await resp.text()
                found = re.search(r"^vllm:num_requests_waiting\{[^}]*\} (\S+)", text, re.M)
                total += float(found.group(1)) if found else 0.0
            peak = max(peak, int(total))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.05)
    return peak


async def learned_limits(url: str) -> list[int]:
    async with aiohttp.ClientSession() as http, http.get(url + "/metrics") as resp:
        text = await resp.text()
    return [
        int(float(v)) for v in re.findall(r"^deja_replica_max_inflight\{[^}]*\} (\S+)", text, re.M)
    ]


async def warm_up(args: argparse.Namespace, gw: dict[str, Proc]) -> dict[str, Any]:
    """A saturating burst through each gateway; the after gateway learns the limit meanwhile."""
    async with client() as http:
        for proc in gw.values():
            sink: list[dict[str, Any]] = []
            await asyncio.gather(
                *(ask(http, proc.url, args.max_tokens, sink) for _ in range(3 * args.max_num_seqs))
            )
    limits = await learned_limits(gw["after"].url)
    return {"after_limits": limits}


def gateway_times(proc: Proc, offset: int) -> dict[str, Any]:
    """The gateway's own latency (access log, from the handler's start: no HTTP parsing and no
    wait for the event loop) of the requests logged since ``offset``, refused and answered."""
    lines = proc.log_path.read_bytes()[offset:].splitlines()
    logged = [json.loads(line) for line in lines if line.startswith(b'{"request_id"')]
    refused = [e["latency_ms"] for e in logged if e["status"] in (429, 503)]
    ok = [e["latency_ms"] for e in logged if e["status"] == 200]
    return {
        "refused_p50_ms": percentile(refused, 50),
        "refused_p99_ms": percentile(refused, 99),
        "refused_max_ms": max(refused, default=float("nan")),
        "ok_p99_ms": percentile(ok, 99),
    }


def log_size(proc: Proc) -> int:
    return proc.log_path.stat().st_size


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r["ms"] for r in results if r["status"] == 200]
    refused = [r["ms"] for r in results if r["status"] in (429, 503)]
    out: dict[str, Any] = {"by_status": dict(Counter(str(r["status"]) for r in results))}
    for name, values in (("ok", ok), ("refused", refused)):
        out[name] = {
            "n": len(values),
            "p50_ms": percentile(values, 50),
            "p99_ms": percentile(values, 99),
            "max_ms": max(values, default=float("nan")),
        }
    return out


# --- the scenarios -----------------------------------------------------------------------------
async def burst(args: argparse.Namespace, url: str, sims: list[str]) -> dict[str, Any]:
    stop = asyncio.Event()
    sampler = asyncio.create_task(peak_waiting(sims, stop))
    results: list[dict[str, Any]] = []
    async with client() as http:
        await asyncio.gather(*(ask(http, url, args.max_tokens, results) for _ in range(args.burst)))
    stop.set()
    return {**summary(results), "replica_peak_waiting": await sampler}


async def overload(args: argparse.Namespace, url: str) -> dict[str, Any]:
    rng = random.Random(args.seed)
    results: list[dict[str, Any]] = []
    tasks: list[asyncio.Task[None]] = []
    async with client() as http:
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            tasks.append(asyncio.create_task(ask(http, url, args.max_tokens, results)))
            await asyncio.sleep(rng.expovariate(args.rate))
        await asyncio.gather(*tasks)
    return {**summary(results), "sent": len(tasks)}


async def half_open(args: argparse.Namespace, url: str, sims: list[str]) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http:
        for sim in sims:
            await (
                await http.put(sim + "/sim/faults", json={"error_rate": 1.0, "error_status": 503})
            ).read()
        opener: list[dict[str, Any]] = []
        await ask(http, url, 4, opener)  # both replicas answer 503: both breakers open
        for sim in sims:
            await (await http.put(sim + "/sim/faults", json={"error_rate": 0.0})).read()
    await asyncio.sleep(args.cooldown + 0.1)  # cooled down: the next request half-opens each
    results: list[dict[str, Any]] = []
    started = time.perf_counter()
    async with client() as http:
        await asyncio.gather(*(ask(http, url, 4, results) for _ in range(args.burst)))
    return {
        **summary(results),
        "opener_status": opener[0]["status"],
        "opener_retry_after": opener[0]["retry_after"],
        "all_done_ms": (time.perf_counter() - started) * 1000,
    }


async def cost(args: argparse.Namespace, gw: dict[str, Proc]) -> dict[str, Any]:
    """Gateway CPU per forced miss, before and after, alternating B A A B ... in 4 rounds."""
    spent: dict[str, list[float]] = {side: [] for side in gw}
    latencies: dict[str, list[float]] = {side: [] for side in gw}
    headers = {"cache-control": "no-cache, no-store"}
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector) as http:
        for rnd in range(4):
            for side in ("before", "after") if rnd % 2 == 0 else ("after", "before"):
                proc = gw[side]
                url = proc.url + "/v1/chat/completions"
                cpu_before = cpu_seconds(proc.popen.pid)
                for _ in range(args.cost_requests):
                    started = time.perf_counter()
                    async with http.post(url, json=payload(8), headers=headers) as resp:
                        await resp.read()
                        if resp.status != 200:
                            raise BenchError(f"{side}: forced miss answered {resp.status}")
                    latencies[side].append((time.perf_counter() - started) * 1e3)
                spent[side].append(cpu_seconds(proc.popen.pid) - cpu_before)
    total = 4 * args.cost_requests
    out = {
        side: {
            "cpu_us_per_request": sum(spent[side]) / total * 1e6,
            "p50_ms": percentile(latencies[side], 50),
        }
        for side in gw
    }
    out["added_cpu_us"] = out["after"]["cpu_us_per_request"] - out["before"]["cpu_us_per_request"]
    return out


# --- report ------------------------------------------------------------------------------------
def rows(result: dict[str, dict[str, Any]]) -> list[list[Any]]:
    out = []
    for side in ("before", "after"):
        r = result.get(side)
        if r is None:
            continue
        out.append(
            [
                side,
                json.dumps(r["by_status"], sort_keys=True),
                r["ok"]["p50_ms"],
                r["ok"]["p99_ms"],
                r["ok"]["max_ms"],
                r["refused"]["p50_ms"],
                r["refused"]["p99_ms"],
                r["refused"]["max_ms"],
                r.get("replica_peak_waiting", ""),
            ]
        )
    return out


HEADERS = [
    "gateway",
    "answers",
    "200 p50 ms",
    "200 p99 ms",
    "200 max ms",
    "refused p50 ms",
    "refused p99 ms",
    "refused max ms",
    "replica peak waiting",
]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    record: dict[str, Any] = {"meta": run_meta(args, "SIMULATED (deja sim)")}
    slow_args = [
        "--speed", "1", "--base-ttft-ms", "0", "--prefill-ms-per-token", "0",
        "--decode-ms-per-token", str(args.decode_ms), "--max-num-seqs", str(args.max_num_seqs),
    ]  # fmt: skip
    sims = [start_sim(f"sim-{i}", cpu=LOADGEN_CPU, args=slow_args) for i in range(2)]
    urls = [s.url for s in sims]
    gw = gateways(args, urls, "ab")
    banner("warm-up")
    record["warm_up"] = await warm_up(args, gw)
    print(f"after gateway's learned in-flight limits: {record['warm_up']['after_limits']}")
    for name, scenario in (("a_burst", burst), ("b_overload", overload)):
        banner(name)
        result: dict[str, Any] = {}
        for side in ("before", "after"):
            proc = gw[side]
            offset = log_size(proc)
            result[side] = (
                await burst(args, proc.url, urls)
                if scenario is burst
                else await overload(args, proc.url)
            )
            await asyncio.sleep(1.0)  # the access log is flushed every 0.2 s
            result[side]["gateway"] = gateway_times(proc, offset)
        record[name] = result
        print(table(HEADERS, rows(result), digits=1))
        print(table(GATEWAY_HEADERS, gateway_rows(result), digits=2))
    for proc in [*gw.values(), *sims]:
        stop_process(proc)
    banner("replicas with no simulated delay (c, d)")
    fast = [start_sim(f"fast-{i}", cpu=LOADGEN_CPU) for i in range(2)]
    gw_c = gateways(args, [s.url for s in fast], "c")
    if "before" in gw_c:
        banner("d_cost")
        record["d_cost"] = await cost(args, gw_c)
        d = record["d_cost"]
        print(
            table(
                ["gateway", "cpu us/request", "client p50 ms"],
                [[k, d[k]["cpu_us_per_request"], d[k]["p50_ms"]] for k in ("before", "after")],
                digits=2,
            )
        )
    banner("c_half_open")
    record["c_half_open"] = {
        side: await half_open(args, proc.url, [s.url for s in fast]) for side, proc in gw_c.items()
    }
    print(table(HEADERS, rows(record["c_half_open"]), digits=1))
    return record


def gateway_rows(result: dict[str, dict[str, Any]]) -> list[list[Any]]:
    out = []
    for side in ("before", "after"):
        g = result.get(side, {}).get("gateway")
        if g is not None:
            out.append(
                [
                    side,
                    g["refused_p50_ms"],
                    g["refused_p99_ms"],
                    g["refused_max_ms"],
                    g["ok_p99_ms"],
                ]
            )
    return out


GATEWAY_HEADERS = [
    "gateway (its own clock)",
    "refused p50 ms",
    "refused p99 ms",
    "refused max ms",
    "200 p99 ms",
]


def verdicts(args: argparse.Namespace, record: dict[str, Any]) -> list[str]:
    after = record["b_overload"]["after"]
    own = after["gateway"]
    deadline_ms = args.deadline * 1000
    lines = [
        f"b. admitted p99 {after['ok']['p99_ms']:.0f} ms within the {deadline_ms:.0f} ms deadline: "
        + verdict(after["ok"]["p99_ms"] <= deadline_ms),
        f"b. refused p99 {own['refused_p99_ms']:.2f} ms (max {own['refused_max_ms']:.2f}) on the "
        f"gateway's clock within {REJECT_TARGET_MS:.0f} ms: "
        + verdict(after["refused"]["n"] > 0 and own["refused_p99_ms"] <= REJECT_TARGET_MS),
        f"b. refused p50/p99 {after['refused']['p50_ms']:.1f}/{after['refused']['p99_ms']:.1f} "
        "ms on the client's clock (loopback HTTP and both event loops' queues included): "
        + verdict(after["refused"]["n"] > 0 and after["refused"]["p99_ms"] <= REJECT_TARGET_MS),
    ]
    c = record["c_half_open"]["after"]
    lines.append(
        f"c. half-open breakers: {c['by_status']} after (before: "
        f"{record['c_half_open'].get('before', {}).get('by_status', 'not run, no --before-ref')})"
    )
    if "d_cost" in record:
        lines.append(
            f"d. a request that never waits: {record['d_cost']['added_cpu_us']:+.1f} µs of gateway "
            "CPU (after - before)"
        )
    return lines


def main() -> None:
    args = parse_args()
    if PINNING:
        os.sched_setaffinity(0, {LOADGEN_CPU})
    try:
        import uvloop  # the client's own overhead is part of what the client measures
    except ImportError:
        record = asyncio.run(run(args))
    else:
        record = uvloop.run(run(args))
    banner("summary")
    lines = verdicts(args, record)
    for line in lines:
        print(line)
    record["verdicts"] = lines
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(record, indent=2, default=str))
    print(f"\nwritten: {args.output}")
    remove_logs()


if __name__ == "__main__":
    raise SystemExit(run_guarded(main))
