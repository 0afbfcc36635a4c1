"""Exact hits from each exact-store backend, measured side by side in ONE run.

Six gateways answer the same exact hit (same request bytes, same answer), one driven at a time
by wrk in interleaved rounds:

    memory          the in-process LRU alone (exact_store: memory)
    disk            the default: SQLite under data_dir with the in-process tier in front
    redis             every hit a Redis GET (redis_client_cache: false, no auto-pipelining)
    redis+pipelining  every hit a Redis read; reads of one event-loop turn sent as one MGET
    redis+tracking    Redis with the client-side tier kept coherent by CLIENT TRACKING
    redis+both        the default with Redis: the client-side tier and auto-pipelining

Targets (issue 12): a Redis-backed exact hit at >= 0.6x the in-process store's throughput, with
p99 <= 3x p50 at concurrency 32.

    .venv/bin/python bench/exact_stores.py [--duration 8] [--rounds 2] [--connections 32]

The replica is SIMULATED (``deja sim``) and never reached during the measured runs (every
request is an exact hit); redis-server runs on the load generator's CPU. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from common import (
    COMMANDS,
    LOADGEN_CPU,
    RESULTS_DIR,
    SERVER_CPU,
    BenchError,
    Proc,
    Target,
    WrkResult,
    banner,
    free_port,
    log_dir,
    pinning_note,
    ratio,
    remove_logs,
    run_guarded,
    run_interleaved,
    run_meta,
    run_wrk,
    start_gateway,
    start_process,
    start_sim,
    table,
    verdict,
    write_lua,
)

MODEL = "deja-sim-1"
CHAT = "/v1/chat/completions"
BODY = json.dumps(
    {
        "model": MODEL,
        "messages": [{"role": "user", "content": "deja bench: exact hits per store"}],
        "max_tokens": 32,
    },
    separators=(",", ":"),
).encode()
RATIO_TARGET = 0.6
TAIL_TARGET = 3.0


def variants(redis_url: str) -> dict[str, dict[str, str]]:
    """Each gateway's settings on top of the defaults (semantic layer off: exact hits never
    reach it, and four embedders would not fit the machine's memory budget)."""
    plain = {"DEJA_REDIS_URL": redis_url, "DEJA_REDIS_CLIENT_CACHE": "false"}
    tracked = {"DEJA_REDIS_URL": redis_url, "DEJA_REDIS_CLIENT_CACHE": "true"}
    return {
        "memory": {"DEJA_EXACT_STORE": "memory"},
        "disk": {"DEJA_EXACT_STORE": "disk"},
        "redis": {**plain, "DEJA_REDIS_AUTO_PIPELINE": "false"},
        "redis+pipelining": {**plain, "DEJA_REDIS_AUTO_PIPELINE": "true"},
        "redis+tracking": {**tracked, "DEJA_REDIS_AUTO_PIPELINE": "false"},
        "redis+both": {**tracked, "DEJA_REDIS_AUTO_PIPELINE": "true"},
    }


def start_redis() -> Proc:
    binary = shutil.which("redis-server")
    if binary is None:
        raise BenchError("redis-server is not installed (`make redis-server`)")
    port = free_port()
    cmd = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    cmd += ["--appendonly", "no", "--protected-mode", "no"]
    proc = start_process("redis", cmd, cpu=LOADGEN_CPU, port=port)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return proc
        except OSError:
            time.sleep(0.05)
    raise BenchError(f"redis-server did not start:\n{proc.log_tail()}")


def prime(gateway: Proc) -> None:
    """Store the answer, then check the gateway serves it as an exact hit."""
    headers = {"content-type": "application/json"}
    with httpx.Client(timeout=10.0) as client:
        client.post(gateway.url + CHAT, content=BODY, headers=headers).raise_for_status()
        for _ in range(100):
            hit = client.post(gateway.url + CHAT, content=BODY, headers=headers)
            if hit.headers.get("x-deja-cache") == "exact":
                return
            time.sleep(0.05)
    raise BenchError(f"{gateway.name} never served the primed request as an exact hit")


def row(result: WrkResult, name: str) -> list[Any]:
    return [
        result.label,
        result.requests,
        result.rps,
        result.p50_ms,
        result.p90_ms,
        result.p99_ms,
        ratio(result.p99_ms, result.p50_ms),
        result.errors,
        result.cpu_pct(name),
        result.cpu_us_per_request(name),
        result.cpu_us_per_request("redis-server"),
        result.other_cpu_pct,
    ]


HEADERS = [
    "store",
    "requests",
    "req/s",
    "p50 ms",
    "p90 ms",
    "p99 ms",
    "p99/p50",
    "err",
    "gw cpu %",
    "gw cpu us/req",
    "redis cpu us/req",
    "other cpu %",
]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    banner("setup: simulated replica, redis-server, one gateway per store")
    sim = start_sim("sim", cpu=LOADGEN_CPU)
    redis = start_redis()
    gateways: dict[str, Proc] = {}
    for name, env in variants(f"redis://127.0.0.1:{redis.port}/0").items():
        slug = name.replace("+", "-")
        env = {**env, "DEJA_SEMANTIC_ENABLED": "false", "DEJA_ACCESS_LOG": "true"}
        env["DEJA_DATA_DIR"] = str(log_dir() / f"data-{slug}")
        gateways[name] = start_gateway(slug, [sim.url], cpu=SERVER_CPU, env=env)
        prime(gateways[name])
    lua = write_lua(BODY, {"Content-Type": "application/json"})
    banner(f"exact hits, c{args.connections}: {args.rounds} interleaved rounds")
    for gateway in gateways.values():
        run_wrk(
            "warmup",
            gateway.url + CHAT,
            lua=lua,
            connections=args.connections,
            duration=args.warmup,
            quiet=True,
        )
    targets = [
        Target(
            name,
            gw.url + CHAT,
            lua,
            {name: gw.popen.pid, "redis-server": redis.popen.pid},
        )
        for name, gw in gateways.items()
    ]
    results, runs = run_interleaved(
        targets, connections=args.connections, duration=args.duration, rounds=args.rounds
    )
    by_name = {r.label: r for r in results}
    print()
    print(table(HEADERS, [row(r, r.label) for r in results]))
    memory = by_name["memory"]
    figures: dict[str, Any] = {"runs": {r.label: r.as_dict() for r in results}}
    figures["rounds"] = [[r.as_dict() for r in target] for target in runs]
    print()
    # Per-round tails: one disturbed round (another process on the server's CPU) inflates the
    # combined p99; the median over rounds shows what a quiet round looked like.
    round_tails = {
        t.label: statistics.median(ratio(r.p99_ms, r.p50_ms) for r in target)
        for t, target in zip(targets, runs, strict=True)
    }
    for name in [r.label for r in results if r.label != "memory"]:
        got = by_name[name]
        rps = ratio(got.rps, memory.rps)
        cpu = ratio(memory.cpu_us_per_request("memory"), got.cpu_us_per_request(name))
        tail = ratio(got.p99_ms, got.p50_ms)
        figures[name] = {
            "rps_over_memory": rps,
            "cpu_memory_over_this": cpu,
            "p99_over_p50": tail,
            "median_round_p99_over_p50": round_tails[name],
        }
        line = f"  {name:>16}: req/s {rps:.3f}x memory, CPU/req memory/this {cpu:.3f}"
        line += f", p99/p50 {tail:.2f} (median round {round_tails[name]:.2f})"
        if name.startswith("redis"):
            ok = rps >= RATIO_TARGET and tail <= TAIL_TARGET
            line += f"  (target >= {RATIO_TARGET}x and p99 <= {TAIL_TARGET}x p50: {verdict(ok)})"
            figures[name]["meets_target"] = ok
        print(line)
    print(
        f"  {'memory':>16}: p99/p50 {ratio(memory.p99_ms, memory.p50_ms):.2f} "
        f"(median round {round_tails['memory']:.2f})"
    )
    return figures


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per store (8)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (2)")
    parser.add_argument("--connections", type=int, default=32, help="wrk connections (32)")
    parser.add_argument("--warmup", type=float, default=2.0, help="warm-up seconds per store")
    parser.add_argument(
        "--output", type=Path, default=RESULTS_DIR / "exact_stores.json", help="JSON record"
    )
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    results: dict[str, Any] = {"meta": run_meta(args, "SIMULATED (deja sim), never reached")}
    print("deja exact stores benchmark -- every request an exact hit")
    print(pinning_note())
    print(results["meta"]["load_at_start"])

    def body() -> None:
        results["stores"] = measure(args)

    failed = run_guarded(body)
    if failed is not None:
        return failed
    results["meta"]["commands"] = list(COMMANDS)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2, allow_nan=True) + "\n")
    print(f"results written to {args.output}")
    remove_logs()
    return 0


if __name__ == "__main__":
    sys.exit(main())
