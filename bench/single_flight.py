"""Single-flight: how many upstream calls 50 identical first-time requests make, with
``DEJA_SINGLE_FLIGHT`` off (before) and on (the default), side by side in ONE run.

One SIMULATED replica whose answers take ``--latency-ms`` (so every request arrives while the
first is still being answered), one gateway per setting. 50 identical JSON requests at once,
then 50 identical streamed requests at once (another question); the figure is the gateway's
``deja_upstream_requests_total`` delta, and the time until the last client had its answer.

    .venv/bin/python bench/single_flight.py [--requests 50] [--latency-ms 500]

Writes ``bench/results/single_flight.json``. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    HOST,
    RESULTS_DIR,
    SERVER_CPU,
    banner,
    run_guarded,
    run_meta,
    start_gateway,
    start_sim,
    stop_process,
    table,
)

MODEL = "deja-sim-1"
FIGURES = ("upstream_calls", "coalesced", "seconds_to_last_answer")


def upstream_calls(base: str) -> float:
    text = httpx.get(base + "/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("deja_upstream_requests_total{")
    )


async def burst(base: str, count: int, *, stream: bool) -> tuple[list[str], float]:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"single flight {uuid.uuid4().hex}"}],
        "max_tokens": 32,
        "stream": stream,
    }
    limits = httpx.Limits(max_connections=count + 8)
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as http:

        async def one() -> str:
            async with http.stream("POST", "/v1/chat/completions", json=body) as reply:
                await reply.aread()
                return reply.headers.get("x-deja-cache", str(reply.status_code))

        started = time.perf_counter()
        outcomes = await asyncio.gather(*(one() for _ in range(count)))
        return list(outcomes), time.perf_counter() - started


def run(args: argparse.Namespace, replica: str, enabled: bool) -> dict[str, Any]:
    env = {"DEJA_SINGLE_FLIGHT": "true" if enabled else "false", "DEJA_SEMANTIC_ENABLED": "false"}
    gateway = start_gateway(f"gw-{enabled}", [replica], cpu=SERVER_CPU, env=env)
    base = f"http://{HOST}:{gateway.port}"
    result: dict[str, Any] = {"single_flight": enabled}
    try:
        for stream in (False, True):
            before = upstream_calls(base)
            outcomes, seconds = asyncio.run(burst(base, args.requests, stream=stream))
            kind = "stream" if stream else "json"
            result[kind] = {
                "upstream_calls": upstream_calls(base) - before,
                "coalesced": outcomes.count("coalesced"),
                "seconds_to_last_answer": seconds,
            }
    finally:
        stop_process(gateway)
    return result


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--latency-ms", type=float, default=500)
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    results: dict[str, Any] = {"meta": run_meta(args, "deja sim (SIMULATED)")}

    def body() -> None:
        sim = start_sim(
            "sim", cpu=None, args=("--speed", "1", "--added-latency-ms", str(args.latency_ms))
        )
        replica = f"http://{HOST}:{sim.port}"
        banner(f"{args.requests} identical first-time requests at once")
        runs = [run(args, replica, enabled) for enabled in (False, True)]
        results["runs"] = runs
        rows = []
        for r in runs:
            for kind in ("json", "stream"):
                calls, coalesced, seconds = (r[kind][k] for k in FIGURES)
                rows.append(
                    ["on" if r["single_flight"] else "off", kind, calls, coalesced, seconds]
                )
        print(
            table(["single-flight", "kind", "upstream calls", "coalesced", "last answer s"], rows)
        )
        RESULTS_DIR.mkdir(exist_ok=True)
        (RESULTS_DIR / "single_flight.json").write_text(json.dumps(results, indent=2))

    return run_guarded(body) or 0


if __name__ == "__main__":
    raise SystemExit(main())
