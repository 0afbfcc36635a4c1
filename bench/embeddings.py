"""An embeddings exact hit against a chat exact hit, through one gateway, in one run.

A ``deja sim`` replica (SIMULATED) and one ``deja serve`` gateway are started on free ports;
one embeddings request (the openai SDK's shape: ``encoding_format: base64``, a 384-float
vector) and one chat request are each sent once so the repeat is an exact hit
(``X-Deja-Cache: exact``, checked on every response); then a closed-loop aiohttp load
generator (``--connections`` loops, no think time) drives each for ``--duration`` seconds,
split into interleaved rounds (A B, B A, ...) so drift hits both alike. Figures: req/s, p50
and p99 per path, and the **embeddings/chat** ratios. The responses differ in size (the
vector is ~2 KB of base64, the chat answer ~0.5 KB), which is part of what is measured.

    .venv/bin/python bench/embeddings.py --duration 10 --connections 16
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    HOST,
    LOADGEN_CPU,
    RESULTS_DIR,
    SERVER_CPU,
    BenchError,
    Proc,
    deja_bin,
    free_port,
    gateway_env,
    load_note,
    pinning_note,
    start_process,
    start_sim,
    stop_all,
    table,
    wait_ready,
)

MODEL = "deja-sim-1"
PATHS = {
    "embeddings exact hit": (
        "/v1/embeddings",
        {
            "model": MODEL,
            "input": "deja bench: the exact-hit path",
            "encoding_format": "base64",
        },
    ),
    "chat exact hit": (
        "/v1/chat/completions",
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "deja bench: the exact-hit path"}],
        },
    ),
}


def gateway_proc(replica: str) -> Proc:
    """``deja serve`` with the benchmarks' environment; up to 2 minutes to start (the model
    files are derived on a first run, and the machine may be shared)."""
    port = free_port()
    cmd = [deja_bin(), "serve", "--host", HOST, "--port", str(port)]
    env = gateway_env([replica])
    proc = start_process("gateway", cmd, cpu=SERVER_CPU, env=env, port=port)
    wait_ready(proc, "/readyz", timeout=120)
    return proc


@dataclass
class Run:
    label: str
    requests: int
    seconds: float
    latencies_ms: list[float]
    response_bytes: int

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def drive(url: str, body: bytes, connections: int, seconds: float, label: str) -> Run:
    """``connections`` closed loops for ``seconds``; every answer must be a 200 exact hit."""
    latencies: list[float] = []
    size = 0
    stop = time.perf_counter() + seconds
    headers = {"content-type": "application/json"}
    conn = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=conn) as session:

        async def loop() -> None:
            nonlocal size
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                async with session.post(url, data=body, headers=headers) as response:
                    data = await response.read()
                    if response.status != 200 or response.headers.get("x-deja-cache") != "exact":
                        raise BenchError(f"{label}: not an exact hit ({response.status})")
                latencies.append((time.perf_counter() - t0) * 1000)
                size = len(data)

        started = time.perf_counter()
        await asyncio.gather(*(loop() for _ in range(connections)))
        elapsed = time.perf_counter() - started
    return Run(label, len(latencies), elapsed, latencies, size)


async def prime(base: str) -> None:
    async with aiohttp.ClientSession() as session:
        for label, (path, body) in PATHS.items():
            outcomes = []
            for _ in range(2):
                async with session.post(base + path, json=body) as response:
                    await response.read()
                    outcomes.append(response.headers.get("x-deja-cache"))
                await asyncio.sleep(0.3)  # the store is off the response path
            if outcomes[-1] != "exact":
                raise BenchError(f"{label}: the repeat was {outcomes[-1]!r}, not an exact hit")
            print(f"  {label}: {' then '.join(map(str, outcomes))}")


async def measure(base: str, args: argparse.Namespace) -> dict[str, list[Run]]:
    await prime(base)
    runs: dict[str, list[Run]] = {label: [] for label in PATHS}
    labels = list(PATHS)
    for label in labels:  # warm-up, not kept
        path, body = PATHS[label]
        await drive(base + path, json.dumps(body).encode(), args.connections, 1.0, label)
    per_round = args.duration / args.rounds
    for i in range(args.rounds):
        for label in labels if i % 2 == 0 else labels[::-1]:
            path, body = PATHS[label]
            runs[label].append(
                await drive(
                    base + path, json.dumps(body).encode(), args.connections, per_round, label
                )
            )
    return runs


def merged(label: str, parts: list[Run]) -> Run:
    return Run(
        label,
        sum(r.requests for r in parts),
        sum(r.seconds for r in parts),
        [x for r in parts for x in r.latencies_ms],
        parts[-1].response_bytes,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "embeddings.json")
    args = parser.parse_args()
    print(f"deja bench: embeddings exact hit vs chat exact hit; {pinning_note()}; {load_note()}")
    print("  the replica is SIMULATED (deja sim); both paths are answered from the exact cache")
    try:
        sim = start_sim("sim", cpu=LOADGEN_CPU)
        gateway = gateway_proc(sim.url)
        runs = asyncio.run(measure(gateway.url, args))
    finally:
        stop_all()
    results = {label: merged(label, parts) for label, parts in runs.items()}
    emb, chat = results["embeddings exact hit"], results["chat exact hit"]
    rows = [
        [r.label, r.requests, round(r.rps, 1), round(r.pct(0.5), 2), round(r.pct(0.99), 2),
         r.response_bytes]
        for r in results.values()
    ]  # fmt: skip
    print()
    print(table(["path", "requests", "req/s", "p50 ms", "p99 ms", "bytes"], rows))
    ratio_rps = emb.rps / chat.rps if chat.rps else float("nan")
    ratio_p50 = emb.pct(0.5) / chat.pct(0.5) if chat.latencies_ms else float("nan")
    print(f"\n  embeddings/chat req/s = {ratio_rps:.3f}; embeddings/chat p50 = {ratio_p50:.3f}")
    print("  per-round req/s: " + "; ".join(
        f"{label}: {', '.join(f'{r.rps:.0f}' for r in parts)}" for label, parts in runs.items()
    ))  # fmt: skip
    args.output.parent.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {
        "connections": args.connections,
        "duration": args.duration,
        "rounds": args.rounds,
        "paths": {
            label: {
                "requests": r.requests,
                "rps": r.rps,
                "p50_ms": r.pct(0.5),
                "p99_ms": r.pct(0.99),
                "response_bytes": r.response_bytes,
                "round_rps": [p.rps for p in runs[label]],
            }
            for label, r in results.items()
        },
        "embeddings_over_chat_rps": ratio_rps,
        "embeddings_over_chat_p50": ratio_p50,
        "median_round_ratio": statistics.median(
            e.rps / c.rps for e, c in zip(runs[emb.label], runs[chat.label], strict=True)
        ),
    }
    args.output.write_text(json.dumps(record, indent=2))
    print(f"  wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
