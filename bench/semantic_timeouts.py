"""Semantic-lookup timeouts and shedding under concurrency (issue 19, finding 5), side by side
in ONE run.

One SIMULATED replica (``deja sim --speed 0``) behind one gateway per source tree: this checkout
and, with ``--baseline DIR``, another one (``git archive main | tar -x -C DIR``), each started as
``python -m app serve`` from its own folder with the defaults (semantic cache on, the shipped
verifier, the temporal classifier, ``semantic_timeout_seconds`` 0.25). For each concurrency
(``--clients 8 32``) and gateway in turn, that many closed-loop clients send questions back to
back for ``--duration`` seconds: half new questions (misses, stored), half paraphrases of
earlier ones (semantic candidates, verified). From ``/metrics`` before and after: requests,
semantic lookups attempted, timed out (past the budget once started) and shed (skipped with no
work started: over ``semantic_max_pending`` for longer than ``semantic_queue_seconds``), semantic
hits, and the lookups whose latency, their wait for a slot included, went past 0.25 s; from the
clients, request p50/p99.

Targets: timeouts < 1% and shed < 1% of requests at every concurrency (``--max-timeout-pct``,
``--max-shed-pct``); the exit status is 1 when either fails for this checkout.

    git archive main | tar -x -C /tmp/deja-main-base
    .venv/bin/python bench/semantic_timeouts.py --baseline /tmp/deja-main-base --duration 15

takes about 2.5 minutes (two gateways, 8 and 32 clients, 15 s each). Writes
``bench/results/semantic_timeouts.json``. Read the ratios: the machine may be shared.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import itertools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import (
    MODEL_CACHE_DIR,
    REPO_ROOT,
    cpu_seconds,
    free_port,
    load_note,
    log_dir,
    percentile,
    stop_all,
    table,
)

SIM_MODEL = "deja-sim-1"


def series(text: str, name: str, label: str = "") -> float:
    pattern = re.compile(rf"^{re.escape(name)}(\{{[^}}]*{re.escape(label)}[^}}]*\}})? (\S+)$", re.M)
    return sum(float(m.group(2)) for m in pattern.finditer(text))


def counts(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=10).text
    lookups = series(text, "deja_cache_lookup_duration_seconds_count", 'layer="semantic"')
    in_time = series(
        text, "deja_cache_lookup_duration_seconds_bucket", 'layer="semantic",le="0.25"'
    )
    return {
        "requests": series(text, "deja_requests_total"),
        "lookups": lookups,
        "timeouts": series(text, "deja_semantic_errors_total", 'kind="timeout"'),
        "shed": series(text, "deja_semantic_errors_total", 'kind="shed"'),
        "hits": series(text, "deja_requests_total", 'cache="semantic"'),
        "slow_lookups": lookups - in_time,  # over 0.25 s, the wait for a slot included
    }


def start(name: str, src: Path, replica: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    data = log_dir() / f"data-{name}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEJA_")}
    env.update(
        DEJA_REPLICAS=replica,
        DEJA_DATA_DIR=str(data),
        DEJA_MODEL_DIR=str(MODEL_CACHE_DIR),
        DEJA_LOG_LEVEL="warning",
        DEJA_ACCESS_LOG="false",
        DEJA_CORPORA_ENABLED="false",
        DEJA_SEMANTIC_SHADOW_RATE="0",
    )
    log = (log_dir() / f"{name}.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=src,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited {proc.returncode}; see {log.name}")
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{name} did not become ready")


QUORA = REPO_ROOT.parent / "shared" / "data" / "qqp_train.jsonl.gz"
#: The second question of a pair is asked this many pairs after the first: far enough back
#: that the first one's answer is stored, not still in flight, at 32 clients.
LAG = 100
#: Requests each run (warm-up or measured) may use before the next run's pairs begin: every
#: run asks questions no earlier run asked (no exact hits from an earlier run).
RUN_SPAN = 8000


def load_pairs(path: Path) -> list[tuple[str, str]]:
    """Quora question pairs ``(a, b)``; ~1/3 are duplicates, the rest hard negatives."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines]
    return [(r["a"].strip(), r["b"].strip()) for r in rows if r["a"].strip() and r["b"].strip()]


def question(pairs: list[tuple[str, str]], n: int) -> str:
    """Even n: a pair's first question, new to the cache; odd n: the second question of the
    pair asked ``LAG`` pairs earlier (a duplicate or a hard negative: found, verified)."""
    if n % 2 == 0:
        return pairs[(n // 2) % len(pairs)][0]
    return pairs[(n // 2 - LAG) % len(pairs)][1]


async def drive(
    pairs: list[tuple[str, str]], url: str, clients: int, duration: float, offset: int
) -> tuple[list[float], int]:
    """``clients`` closed-loop clients for ``duration`` s: request latencies (s) and errors."""
    numbers = itertools.count(offset)
    stop = time.monotonic() + duration
    latencies: list[float] = []
    errors = 0

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal errors
        while time.monotonic() < stop:
            body = {
                "model": SIM_MODEL,
                "messages": [{"role": "user", "content": question(pairs, next(numbers))}],
            }
            started = time.perf_counter()
            try:
                reply = await http.post(url + "/v1/chat/completions", json=body)
                errors += reply.status_code != 200
            except httpx.HTTPError:
                errors += 1
            latencies.append(time.perf_counter() - started)

    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(timeout=30, limits=limits) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    return latencies, errors


COLUMNS = [
    "gateway",
    "clients",
    "requests",
    "lookups",
    "timeouts",
    "timeout %",
    "shed",
    "shed %",
    "hits",
    "lookups > 0.25 s",
    "p50 ms",
    "p99 ms",
    "CPU ms/req",
    "all CPU ms/req",
    "errors",
]


def measure(
    pairs: list[tuple[str, str]],
    run: int,
    name: str,
    proc: subprocess.Popen[bytes],
    sim: subprocess.Popen[bytes],
    url: str,
    clients: int,
    duration: float,
) -> dict[str, Any]:
    """One gateway at one concurrency: the /metrics deltas, the gateway's CPU per request
    (what the machine's load moves least) and the clients' latencies."""
    asyncio.run(drive(pairs, url, clients, 2.0, (2 * run) * RUN_SPAN))  # warm-up
    before = counts(url)
    cpu = cpu_seconds(proc.pid)
    others = cpu_seconds(sim.pid) + time.process_time()  # the simulated replica, the clients
    latencies, errors = asyncio.run(drive(pairs, url, clients, duration, (2 * run + 1) * RUN_SPAN))
    cpu = cpu_seconds(proc.pid) - cpu
    others = cpu_seconds(sim.pid) + time.process_time() - others
    after = counts(url)
    delta = {k: after[k] - before[k] for k in after}
    requests = max(delta["requests"], 1.0)
    return {
        "gateway": name,
        "clients": clients,
        **delta,
        "errors": errors,
        "timeout_pct": 100 * delta["timeouts"] / requests,
        "shed_pct": 100 * delta["shed"] / requests,
        "cpu_ms_per_request": 1000 * cpu / requests,
        # The sim's and the clients' CPU beside it: with the gateway's, the whole machine's
        # work per request (2,000 CPU-ms/s over it: the most requests/s 2 idle cores can do).
        "all_cpu_ms_per_request": 1000 * (cpu + others) / requests,
        "p50_ms": 1000 * percentile(latencies, 50),
        "p99_ms": 1000 * percentile(latencies, 99),
    }


def row(r: dict[str, Any]) -> list[Any]:
    return [
        r["gateway"],
        r["clients"],
        int(r["requests"]),
        int(r["lookups"]),
        int(r["timeouts"]),
        f"{r['timeout_pct']:.2f}%",
        int(r["shed"]),
        f"{r['shed_pct']:.2f}%",
        int(r["hits"]),
        int(r["slow_lookups"]),
        round(r["p50_ms"], 1),
        round(r["p99_ms"], 1),
        round(r["cpu_ms_per_request"], 1),
        round(r["all_cpu_ms_per_request"], 1),
        r["errors"],
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="another source tree to compare with")
    parser.add_argument("--clients", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--max-timeout-pct", type=float, default=1.0)
    parser.add_argument("--max-shed-pct", type=float, default=1.0)
    parser.add_argument("--pairs", type=Path, default=QUORA, help="question pairs (JSON lines)")
    args = parser.parse_args()
    pairs = load_pairs(args.pairs)
    sim_port = free_port()
    sim = subprocess.Popen(
        [sys.executable, "-m", "app", "sim", "--port", str(sim_port), "--speed", "0"],
        cwd=REPO_ROOT,
        stdout=(log_dir() / "sim.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    sim_url = f"http://127.0.0.1:{sim_port}"
    trees = {"this": REPO_ROOT} | ({"baseline": args.baseline} if args.baseline else {})
    gateways = {name: start(name, src, sim_url) for name, src in trees.items()}
    print(load_note(), flush=True)
    results: list[dict[str, Any]] = []
    try:
        for clients in args.clients:
            for name, (proc, url) in gateways.items():
                run = len(results)
                results.append(measure(pairs, run, name, proc, sim, url, clients, args.duration))
                print(table(COLUMNS, [row(results[-1])]), flush=True)
        print(table(COLUMNS, [row(r) for r in results]))
    finally:
        for proc in [p for p, _ in gateways.values()] + [sim]:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        stop_all()
    out = REPO_ROOT / "bench" / "results" / "semantic_timeouts.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"results": results, "duration": args.duration}, indent=2))
    ours = [r for r in results if r["gateway"] == "this"]
    timeouts_ok = all(r["timeout_pct"] < args.max_timeout_pct for r in ours)
    shed_ok = all(r["shed_pct"] < args.max_shed_pct for r in ours)
    print(
        f"timeouts < {args.max_timeout_pct:g}% of requests at every concurrency:",
        "yes" if timeouts_ok else "NO",
    )
    print(
        f"shed < {args.max_shed_pct:g}% of requests at every concurrency:",
        "yes" if shed_ok else "NO",
    )
    return 0 if timeouts_ok and shed_ok else 1


if __name__ == "__main__":
    sys.exit(main())
