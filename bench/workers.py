"""``deja serve --workers N``: CPU per exact hit with 1 and 2 workers, side by side in ONE run.

One gateway with a real Redis (the exact store every worker shares; the semantic layer and the
corpora off), one SIMULATED replica at ``--speed 0``. One answer is stored, then ``wrk`` asks it
again and again (exact hits) at ``--connections`` for ``--duration`` seconds, first against
``--workers 1``, then ``--workers 2`` (restarted between, the same Redis). This machine has two
cores, so throughput cannot show the scaling: the figure is the gateway's CPU time per request
(the supervisor and every worker, from ``/proc``) and how evenly the workers shared the work.
Both gateways run on cpu 0 (the workers inherit the supervisor's pinning) and wrk on cpu 1, so
neither worker shares a core with the load generator: what differs is only the second process
(accepting on the same socket, its own client-side tier kept coherent by Redis).

Target (issue 12): CPU per exact hit with 2 workers within 10% of one worker's.

    .venv/bin/python bench/workers.py [--duration 10] [--connections 32]

Writes ``bench/results/workers.json``. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    HOST,
    LOADGEN_CPU,
    RESULTS_DIR,
    SERVER_CPU,
    banner,
    deja_bin,
    free_port,
    gateway_env,
    run_guarded,
    run_meta,
    run_wrk,
    start_process,
    start_sim,
    stop_process,
    table,
    verdict,
    wait_ready,
    write_lua,
)

MODEL = "deja-sim-1"
COLUMNS = ("workers", "requests", "rps", "p50_ms", "p99_ms", "cpu_us_per_request")


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def start_redis() -> Any:
    port = free_port()
    cmd = ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"]
    proc = start_process("redis", cmd, cpu=None, port=port)
    for _ in range(100):
        try:
            with socket.create_connection((HOST, port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.05)
    return proc


def run(args: argparse.Namespace, workers: int, replica: str, redis_url: str) -> dict[str, Any]:
    port = free_port()
    env = gateway_env(
        [replica],
        {
            "DEJA_REDIS_URL": redis_url,
            "DEJA_SEMANTIC_ENABLED": "false",
            "DEJA_CORPORA_ENABLED": "false",
            "DEJA_WORKERS": str(workers),
        },
    )
    gateway = start_process(
        f"gw-{workers}",
        [deja_bin(), "serve", "--host", HOST, "--port", str(port)],
        cpu=SERVER_CPU,
        env=env,
        port=port,
    )
    wait_ready(gateway, "/readyz", timeout=60)
    url = f"http://{HOST}:{port}/v1/chat/completions"
    body = {"model": MODEL, "messages": [{"role": "user", "content": "workers bench"}]}
    raw = json.dumps(body).encode()
    try:
        httpx.post(url, content=raw, headers={"content-type": "application/json"}, timeout=30)
        time.sleep(1.0)  # the store runs after the response
        pids = [gateway.popen.pid, *children(gateway.popen.pid)]
        lua = write_lua(raw, {"content-type": "application/json"})
        run_wrk(f"warm-{workers}", url, lua=lua, connections=args.connections, duration=2)
        watch = {f"pid{pid}": pid for pid in pids}
        result = run_wrk(
            f"workers={workers}",
            url,
            lua=lua,
            connections=args.connections,
            duration=args.duration,
            cpu=LOADGEN_CPU,
            watch=watch,
        )
    finally:
        stop_process(gateway)
    cpu = sum(result.cpu_s.values())
    per_worker = {k: v for k, v in result.cpu_s.items() if k != f"pid{gateway.popen.pid}"}
    return {
        "workers": workers,
        "requests": result.requests,
        "rps": result.rps,
        "p50_ms": result.p50_ms,
        "p99_ms": result.p99_ms,
        "errors": result.errors,
        "cpu_s": cpu,
        "cpu_us_per_request": cpu / result.requests * 1e6 if result.requests else 0.0,
        "worker_cpu_s": per_worker,
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--connections", type=int, default=32)
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    results: dict[str, Any] = {"meta": run_meta(args, "deja sim --speed 0 (SIMULATED)")}

    def body() -> None:
        redis = start_redis()
        sim = start_sim("sim", cpu=None)
        replica = f"http://{HOST}:{sim.port}"
        redis_url = f"redis://{HOST}:{redis.port}/0"
        banner("exact hits from Redis, --workers 1 vs 2")
        runs = [run(args, n, replica, redis_url) for n in (1, 2)]
        results["runs"] = runs
        print(
            table(
                ["workers", "requests", "req/s", "p50 ms", "p99 ms", "CPU µs/request"],
                [[r[k] for k in COLUMNS] for r in runs],
            )
        )
        one, two = runs
        ratio = two["cpu_us_per_request"] / one["cpu_us_per_request"]
        shares = sorted(two["worker_cpu_s"].values())
        balance = shares[0] / shares[-1] if shares and shares[-1] else 0.0
        results["cpu_ratio"], results["balance"] = ratio, balance
        print(
            f"\nCPU per exact hit, 2 workers / 1 worker: {ratio:.3f} "
            f"({verdict(ratio <= 1.10)}: target <= 1.10); the two workers' CPU, "
            f"least/most: {balance:.2f}"
        )
        RESULTS_DIR.mkdir(exist_ok=True)
        (RESULTS_DIR / "workers.json").write_text(json.dumps(results, indent=2))

    return run_guarded(body) or 0


if __name__ == "__main__":
    raise SystemExit(main())
