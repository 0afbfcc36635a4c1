"""Open-loop streaming client of ``routing.py``: one run, one JSON object on stdout.

Reads a workload file (written by ``routing.py``): the system prompts, and per phase the
requests as ``[send offset s, prompt index, user message]``. Phases run one after the other;
within a phase every request is sent at its scheduled offset (Poisson arrivals, whatever the
answers do: open loop), streamed, and timed. A phase ends when its last answer is complete, so
the next one starts with idle replicas. Around each phase marked ``measure`` the simulated
replicas' ``/metrics`` are read (before and after: the caller takes counter deltas), and while it
runs the gateway's ``GET /admin/replicas`` is sampled every ``--sample-ms`` for each replica's
``in_flight`` (the gateway's own count, the load its router bounds).

Per request: scheduled and actual send offset, time to the response headers, to the first
content chunk (the client-observed TTFT) and to the end, HTTP status, ``X-Deja-Replica``,
``X-Deja-Route``, SSE events. An admin key, if the gateway needs one, comes from the
``ROUTING_BENCH_ADMIN_KEY`` environment variable.

    python bench/routing_client.py --url http://127.0.0.1:8000 --workload wl.json \\
        --sims http://127.0.0.1:9001,http://127.0.0.1:9002 --sample-ms 20
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

CHAT = "/v1/chat/completions"
ADMIN = "/admin/replicas"
NO_CACHE = "no-cache, no-store"


def body_for(workload: dict[str, Any], prompt: int, user: str) -> bytes:
    payload = {
        "model": workload["model"],
        "messages": [
            {"role": "system", "content": workload["prompts"][prompt]},
            {"role": "user", "content": user},
        ],
        "max_tokens": workload["max_tokens"],
        "stream": True,
    }
    return orjson.dumps(payload)


def is_content(line: bytes) -> bool:
    """True for an SSE ``data:`` event carrying non-empty content (not the role chunk)."""
    payload = line[5:].strip()
    if not payload or payload == b"[DONE]":
        return False
    try:
        event = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return False
    for choice in event.get("choices") or []:
        delta = choice.get("delta") or {}
        if delta.get("content") or choice.get("text"):
            return True
    return False


async def one(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    index: int,
    prompt: int,
    scheduled: float,
    t0: float,
) -> dict[str, Any]:
    start = time.perf_counter()
    record: dict[str, Any] = {
        "i": index,
        "prompt": prompt,
        "scheduled_s": scheduled,
        "start_s": start - t0,
        "status": -1,
        "replica": None,
        "route": None,
        "headers_ms": None,
        "ttft_ms": None,
        "total_ms": None,
        "events": 0,
        "error": None,
    }
    headers = {"content-type": "application/json", "cache-control": NO_CACHE}
    try:
        async with session.post(url, data=body, headers=headers) as response:
            record["headers_ms"] = (time.perf_counter() - start) * 1000
            record["status"] = response.status
            record["replica"] = response.headers.get("x-deja-replica")
            record["route"] = response.headers.get("x-deja-route")
            if response.status != 200:
                record["error"] = (await response.text())[:300]
            else:
                first: float | None = None
                events = 0
                async for line in response.content:
                    if not line.startswith(b"data:"):
                        continue
                    events += 1
                    if first is None and is_content(line):
                        first = time.perf_counter()
                record["events"] = events
                if first is not None:
                    record["ttft_ms"] = (first - start) * 1000
    except (aiohttp.ClientError, TimeoutError) as exc:
        record["error"] = f"{type(exc).__name__}: {exc}"
    end = time.perf_counter()
    record["total_ms"] = (end - start) * 1000
    record["end_s"] = end - t0
    return record


async def sample_admin(
    session: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    interval: float,
    t0: float,
    stop: asyncio.Event,
    out: dict[str, Any],
) -> None:
    """Every ``interval`` seconds: each replica's ``in_flight`` (and scraped running+waiting)."""
    samples: list[list[Any]] = out["samples"]
    while not stop.is_set():
        tick = time.perf_counter()
        try:
            async with session.get(url, headers=headers) as response:
                report = await response.json(loads=orjson.loads)
            replicas = report["replicas"]
            if not out["names"]:
                out["names"] = [r["name"] for r in replicas]
            samples.append(
                [
                    tick - t0,
                    [int(r["in_flight"]) for r in replicas],
                    [
                        float(r["metrics"]["num_requests_running"] or 0)
                        + float(r["metrics"]["num_requests_waiting"] or 0)
                        for r in replicas
                    ],
                ]
            )
        except (aiohttp.ClientError, TimeoutError, KeyError, ValueError) as exc:
            out["errors"] += 1
            out["last_error"] = f"{type(exc).__name__}: {exc}"
        delay = interval - (time.perf_counter() - tick)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=max(0.001, delay))


async def read_metrics(session: aiohttp.ClientSession, sims: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for sim in sims:
        async with session.get(sim + "/metrics") as response:
            out[sim] = await response.text()
    return out


async def run_phase(
    session: aiohttp.ClientSession,
    args: argparse.Namespace,
    workload: dict[str, Any],
    phase: dict[str, Any],
) -> dict[str, Any]:
    url = args.url + CHAT
    measure = bool(phase.get("measure"))
    result: dict[str, Any] = {"name": phase["name"], "measure": measure}
    if measure:
        result["metrics_before"] = await read_metrics(session, args.sims)
    t0 = time.perf_counter()
    stop = asyncio.Event()
    admin: dict[str, Any] = {"names": [], "samples": [], "errors": 0, "last_error": None}
    sampler: asyncio.Task[None] | None = None
    if measure and args.sample_ms > 0:
        key = os.environ.get("ROUTING_BENCH_ADMIN_KEY")
        headers = {"authorization": f"Bearer {key}"} if key else {}
        sampler = asyncio.create_task(
            sample_admin(session, args.url + ADMIN, headers, args.sample_ms / 1000, t0, stop, admin)
        )
    tasks: list[asyncio.Task[dict[str, Any]]] = []
    cpu0 = time.process_time()
    for index, (offset, prompt, user) in enumerate(phase["requests"]):
        delay = t0 + offset - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        body = body_for(workload, prompt, user)
        tasks.append(asyncio.create_task(one(session, url, body, index, prompt, offset, t0)))
    sent_s = time.perf_counter() - t0
    runs = await asyncio.gather(*tasks)
    result["wall_s"] = time.perf_counter() - t0
    result["sent_s"] = sent_s
    result["client_cpu_s"] = time.process_time() - cpu0
    stop.set()
    if sampler is not None:
        await sampler
    result["runs"] = runs
    if measure:
        result["admin"] = admin
        result["metrics_after"] = await read_metrics(session, args.sims)
    return result


async def run(args: argparse.Namespace, workload: dict[str, Any]) -> dict[str, Any]:
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    phases = []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for phase in workload["phases"]:
            phases.append(await run_phase(session, args, workload, phase))
    return {"phases": phases}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--url", required=True, help="gateway base URL")
    parser.add_argument("--workload", required=True, type=Path)
    parser.add_argument("--sims", required=True, help="comma-separated replica base URLs")
    parser.add_argument("--sample-ms", type=float, default=20.0)
    parser.add_argument("--timeout", type=float, default=120.0, help="per request, seconds")
    args = parser.parse_args()
    args.url = args.url.rstrip("/")
    args.sims = [s.rstrip("/") for s in args.sims.split(",") if s]
    workload = json.loads(args.workload.read_text())
    try:
        import uvloop
    except ImportError:
        out = asyncio.run(run(args, workload))
    else:
        out = uvloop.run(run(args, workload))
    sys.stdout.write(json.dumps(out))


if __name__ == "__main__":
    main()
