"""Client processes of ``semantic_paths.py``: one run, one JSON object on stdout.

``latency``: sequential requests (concurrency 1) over one keep-alive connection, the kinds
given by ``--kinds`` taken in turn (semantic, exact, miss, semantic, ...), so every kind sees
the same conditions. Per request: the time to the full response body and ``X-Deja-Cache``.

``throughput``: ``--concurrency`` workers send semantic-hit candidates (unique texts) back to
back for ``--duration`` seconds after ``--warmup`` seconds; completions, latencies, outcomes
and the client's own CPU time over the measured window.

``embed``: loads the gateway's embedder in this process and embeds unique texts of the same
shape one at a time, ``embed_batch([text])`` on this one thread (what the gateway's executor
thread does per text), for ``--duration`` seconds.

    python bench/semantic_client.py latency --url http://127.0.0.1:8000/v1/chat/completions \\
        --question 'How do I ...?' --requests 300 --id-start 10000
    python bench/semantic_client.py throughput --url ... --concurrency 16 --duration 4
    python bench/semantic_client.py embed --model-dir bench/results/.cache/models --duration 4

Semantic-hit candidates are ``"<question> #<n>"`` with a unique five-digit ``n`` per request:
never sent before (no exact hit), a paraphrase of the cached ``<question>``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

NO_CACHE = "no-cache, no-store"
ID_LIMIT = 100_000  # ids stay five digits, so every text has the same token count


def chat_body(model: str, text: str) -> bytes:
    payload = {"model": model, "messages": [{"role": "user", "content": text}]}
    return json.dumps(payload, separators=(",", ":")).encode()


def variant(question: str, n: int) -> str:
    """The ``n``-th semantic-hit candidate of ``question``."""
    if not 10_000 <= n < ID_LIMIT:
        raise SystemExit(f"text id {n} out of the five-digit range")
    return f"{question} #{n}"


class Ids:
    """Unique text ids handed out in order."""

    def __init__(self, start: int) -> None:
        self.next = start
        self.start = start

    def take(self) -> int:
        n = self.next
        self.next += 1
        return n


# --------------------------------------------------------------------------------------------
# HTTP


async def post(session: Any, url: str, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
    """One POST; time to the end of the body, outcome header, similarity."""
    start = time.perf_counter()
    async with session.post(url, data=body, headers=headers) as response:
        await response.read()
        elapsed = time.perf_counter() - start
        status = response.status
        cache = response.headers.get("x-deja-cache")
        similarity = response.headers.get("x-deja-similarity")
    return {
        "ms": elapsed * 1000,
        "status": status,
        "cache": cache,
        "similarity": float(similarity) if similarity else None,
    }


def session_for(concurrency: int) -> Any:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=30)
    return aiohttp.ClientSession(connector=connector, timeout=timeout)


def request_for(kind: str, args: argparse.Namespace, ids: Ids) -> tuple[bytes, dict[str, str]]:
    headers = {"content-type": "application/json"}
    if kind == "semantic":
        return chat_body(args.model, variant(args.question, ids.take())), headers
    if kind == "exact":
        return chat_body(args.model, args.question), headers
    if kind == "miss":
        return chat_body(args.model, args.question), {**headers, "cache-control": NO_CACHE}
    raise SystemExit(f"unknown kind {kind!r}")


async def run_latency(args: argparse.Namespace) -> dict[str, Any]:
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    ids = Ids(args.id_start)
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    async with session_for(1) as session:
        for _ in range(args.warmup):
            for kind in kinds:
                body, headers = request_for(kind, args, ids)
                await post(session, args.url, body, headers)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for _ in range(args.requests):
            for kind in kinds:
                body, headers = request_for(kind, args, ids)
                runs[kind].append(await post(session, args.url, body, headers))
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0
    return {
        "mode": "latency",
        "kinds": kinds,
        "runs": runs,
        "wall_s": wall,
        "client_cpu_s": cpu,
        "id_start": ids.start,
        "id_next": ids.next,
    }


async def run_throughput(args: argparse.Namespace) -> dict[str, Any]:
    ids = Ids(args.id_start)
    done: list[dict[str, Any]] = []
    state = {"measuring": False, "stop": False}

    async def worker(session: Any) -> None:
        while not state["stop"]:
            body, headers = request_for("semantic", args, ids)
            result = await post(session, args.url, body, headers)
            if state["measuring"]:
                done.append(result)

    async with session_for(args.concurrency) as session:
        tasks = [asyncio.create_task(worker(session)) for _ in range(args.concurrency)]
        await asyncio.sleep(args.warmup)
        warm_ids = ids.next - ids.start
        state["measuring"] = True
        cpu0, wall0 = time.process_time(), time.perf_counter()
        await asyncio.sleep(args.duration)
        state["stop"] = True
        await asyncio.gather(*tasks)  # requests in flight finish and count
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0
    return {
        "mode": "throughput",
        "concurrency": args.concurrency,
        "runs": done,
        "wall_s": wall,
        "client_cpu_s": cpu,
        "warmup_requests": warm_ids,
        "id_start": ids.start,
        "id_next": ids.next,
    }


# --------------------------------------------------------------------------------------------
# embedder alone


def run_embed(args: argparse.Namespace) -> dict[str, Any]:
    from deja.embedding.onnx.embedder import load_onnx_embedder

    t0 = time.perf_counter()
    embedder = load_onnx_embedder(Path(args.model_dir), threads=args.threads)
    load_s = time.perf_counter() - t0
    ids = Ids(args.id_start)
    for _ in range(args.warmup):
        embedder.embed_batch([variant(args.question, ids.take())])
    latencies: list[float] = []
    cpu0 = time.process_time()
    wall0 = time.perf_counter()
    deadline = wall0 + args.duration
    now = wall0
    while now < deadline:
        text = variant(args.question, ids.take())
        start = time.perf_counter()
        embedder.embed_batch([text])
        now = time.perf_counter()
        latencies.append((now - start) * 1000)
    wall = now - wall0
    cpu = time.process_time() - cpu0
    return {
        "mode": "embed",
        "model_id": embedder.model_id,
        "threads": args.threads,
        "load_s": load_s,
        "texts": len(latencies),
        "wall_s": wall,
        "cpu_s": cpu,
        "latencies_ms": latencies,
        "id_start": ids.start,
        "id_next": ids.next,
    }


# --------------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="mode", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--question", required=True)
    common.add_argument("--id-start", type=int, default=10_000)
    http = argparse.ArgumentParser(add_help=False, parents=[common])
    http.add_argument("--url", required=True)
    http.add_argument("--model", default="deja-sim-1")
    lat = sub.add_parser("latency", parents=[http])
    lat.add_argument("--kinds", default="semantic,exact,miss")
    lat.add_argument("--requests", type=int, default=300, help="per kind")
    lat.add_argument("--warmup", type=int, default=20, help="per kind")
    tput = sub.add_parser("throughput", parents=[http])
    tput.add_argument("--concurrency", type=int, default=16)
    tput.add_argument("--duration", type=float, default=4.0)
    tput.add_argument("--warmup", type=float, default=0.5)
    emb = sub.add_parser("embed", parents=[common])
    emb.add_argument("--model-dir", required=True)
    emb.add_argument("--threads", type=int, default=1)
    emb.add_argument("--duration", type=float, default=4.0)
    emb.add_argument("--warmup", type=int, default=30)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.mode == "embed":
        result = run_embed(args)
    else:
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
        runner = run_latency if args.mode == "latency" else run_throughput
        result = asyncio.run(runner(args))
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
