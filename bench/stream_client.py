"""Sequential streaming client, run as its own process by ``gateway_paths.py``.

Sends ``--requests`` identical streaming POSTs one after the other over one keep-alive
connection and prints one JSON object: per request the time to the response headers, to the
first body bytes, to the end, the SSE events (``data:`` lines) and the body pieces received.

    python bench/stream_client.py --url http://127.0.0.1:8000/v1/chat/completions \\
        --body body.json --header 'Cache-Control: no-cache, no-store' --requests 50
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx


def one(client: httpx.Client, url: str, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
    start = time.perf_counter()
    first: float | None = None
    pieces = 0
    received = bytearray()
    with client.stream("POST", url, content=body, headers=headers) as response:
        t_headers = time.perf_counter() - start
        if response.status_code != 200:
            response.read()
            raise SystemExit(f"HTTP {response.status_code} from {url}: {response.text[:300]}")
        for raw in response.iter_raw():
            if not raw:
                continue
            if first is None:
                first = time.perf_counter() - start
            pieces += 1
            received += raw
    total = time.perf_counter() - start
    events = received.count(b"data: ")
    if not received.rstrip().endswith(b"data: [DONE]"):
        raise SystemExit(f"stream from {url} did not end with data: [DONE]")
    return {
        "headers_ms": t_headers * 1000,
        "first_chunk_ms": (first if first is not None else total) * 1000,
        "total_ms": total * 1000,
        "events": events,
        "pieces": pieces,
        "bytes": len(received),
        "cache": response.headers.get("x-deja-cache"),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--body", type=Path, required=True)
    parser.add_argument("--header", action="append", default=[], help="'Name: value'")
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    body = args.body.read_bytes()
    headers = {"content-type": "application/json"}
    for item in args.header:
        name, _, value = item.partition(":")
        headers[name.strip()] = value.strip()
    runs: list[dict[str, Any]] = []
    with httpx.Client(timeout=30.0) as client:
        for _ in range(args.warmup):
            one(client, args.url, body, headers)
        for _ in range(args.requests):
            runs.append(one(client, args.url, body, headers))
    json.dump({"url": args.url, "runs": runs}, sys.stdout)


if __name__ == "__main__":
    main()
