"""Semantic-lookup timeouts under concurrency (issue 19, finding 5), side by side in ONE run.

One SIMULATED replica (``deja sim --speed 0``) behind one gateway per source tree: this checkout
and, with ``--baseline DIR``, another one (e.g. ``git archive base-stop17 | tar -x -C DIR``), each
started as ``python -m app serve`` from its own folder with the defaults (semantic cache on,
the shipped verifier, the temporal classifier, ``semantic_timeout_seconds`` 0.25). For each
concurrency (``--clients 8 32``) and gateway in turn, that many clients send questions back to
back for ``--duration`` seconds: half new questions (misses, stored), half paraphrases of
earlier ones (semantic candidates, verified). From ``/metrics`` before and after: semantic
lookups attempted, timed out, and shed (skipped at once over ``semantic_max_pending``; a
safe miss, reported apart from timeouts). Target: timeouts < 1% of lookups at 8 and 32.

    .venv/bin/python bench/semantic_timeouts.py [--baseline DIR] [--clients 8 32] [--duration 20]

Writes ``bench/results/semantic_timeouts.json``. The machine is shared: read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import (
    MODEL_CACHE_DIR,
    REPO_ROOT,
    free_port,
    load_note,
    log_dir,
    stop_all,
    table,
)

SIM_MODEL = "deja-sim-1"
TOPICS = ["agent", "proxy", "cache", "router", "replica", "tenant", "corpus", "threshold"]


def series(text: str, name: str, label: str = "") -> float:
    pattern = re.compile(rf"^{re.escape(name)}(\{{[^}}]*{re.escape(label)}[^}}]*\}})? (\S+)$", re.M)
    return sum(float(m.group(2)) for m in pattern.finditer(text))


def counts(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=10).text
    return {
        "lookups": series(text, "deja_cache_lookup_duration_seconds_count", 'layer="semantic"'),
        "timeouts": series(text, "deja_semantic_errors_total", 'kind="timeout"'),
        "shed": series(text, "deja_semantic_errors_total", 'kind="shed"'),
        "requests": series(text, "deja_requests_total"),
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


async def drive(url: str, clients: int, duration: float, offset: int) -> int:
    numbers = itertools.count(offset)
    stop = time.monotonic() + duration
    errors = 0

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal errors
        while time.monotonic() < stop:
            n = next(numbers)
            topic = TOPICS[n % len(TOPICS)]
            text = (
                f"How do I configure the {topic} number {n // 2}?"
                if n % 2 == 0
                else f"What is the process for configuring the {topic} number {n // 2 - 1}?"
            )
            body = {"model": SIM_MODEL, "messages": [{"role": "user", "content": text}]}
            try:
                reply = await http.post(url + "/v1/chat/completions", json=body)
                errors += reply.status_code != 200
            except httpx.HTTPError:
                errors += 1

    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(timeout=30, limits=limits) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    return errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="another source tree to compare with")
    parser.add_argument("--clients", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--duration", type=float, default=20.0)
    args = parser.parse_args()
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
    print(load_note())
    rows, results = [], []
    try:
        for clients in args.clients:
            for name, (_, url) in gateways.items():
                asyncio.run(drive(url, clients, 2.0, 10**6 * clients))  # warm-up
                before = counts(url)
                errors = asyncio.run(drive(url, clients, args.duration, 10**7 * clients))
                after = counts(url)
                delta = {k: after[k] - before[k] for k in after}
                lookups = max(delta["lookups"], 1.0)
                result = {
                    "gateway": name,
                    "clients": clients,
                    **delta,
                    "errors": errors,
                    "timeout_pct": 100 * delta["timeouts"] / lookups,
                    "shed_pct": 100 * delta["shed"] / max(delta["lookups"] + delta["shed"], 1),
                }
                results.append(result)
                rows.append(
                    [
                        name,
                        clients,
                        int(delta["requests"]),
                        int(delta["lookups"]),
                        int(delta["timeouts"]),
                        f"{result['timeout_pct']:.2f}%",
                        int(delta["shed"]),
                        f"{result['shed_pct']:.1f}%",
                    ]
                )
        print(
            table(
                [
                    "gateway",
                    "clients",
                    "requests",
                    "lookups",
                    "timeouts",
                    "timeout %",
                    "shed",
                    "shed %",
                ],
                rows,
            )
        )
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
    ok = all(r["timeout_pct"] < 1.0 for r in results if r["gateway"] == "this")
    print("timeouts < 1% at every concurrency:", "yes" if ok else "NO")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
