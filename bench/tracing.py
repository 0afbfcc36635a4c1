"""What tracing to Langfuse costs one request, side by side with tracing off, in one run.

Each "request" is what the gateway does for tracing on an exact hit: the ``deja.request`` span,
its ``deja.exact`` child, and the request attributes (``request_attributes``: the GenAI,
``deja.*`` and ``langfuse.*`` ones). With tracing off the spans are the shared no-op. With
Langfuse on, spans go through the batch span processor to an OTLP/HTTP exporter posting to a
local receiver (a separate process standing in for Langfuse, so its CPU is not counted).

Reported per request: CPU on the request's thread (what the request path pays), and CPU of the
whole process (adds the exporter thread's encoding and posting, spent off the request path but
on the same interpreter).

    .venv/bin/python bench/tracing.py --requests 5120 --rounds 3
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from deja.observability.langfuse import langfuse_exporter, request_attributes
from deja.observability.tracing import Tracing, set_attributes
from deja.request import CachePolicy, GatewayRequest

RECEIVER = r"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class H(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""

REQ = GatewayRequest(
    endpoint="chat",
    body={},
    raw=b"{}",
    model="deja-sim-1",
    stream=False,
    include_usage=False,
    cacheable=True,
    tenant="acme",
    policy=CachePolicy(),
    request_id="deja-bench-1",
)
#: Requests (two spans each) between pauses: the batch processor exports 512 spans at a time
#: and queues at most 2,048.
BATCH = 256
PAUSE = 0.1
USAGE = {"prompt_tokens": 24, "completion_tokens": 120, "total_tokens": 144}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def one_request(tracing: Tracing) -> None:
    with tracing.request_span("deja.request") as span:
        with tracing.span("deja.exact"):
            pass
        if span is not None:  # as middleware/telemetry.py: attributes only for a real span
            set_attributes(
                span,
                request_attributes(
                    REQ,
                    outcome="semantic",
                    status=200,
                    similarity=0.9868,
                    verifier_score=0.9361,
                    entry="8dfaed7a379c" * 5 + "abcd",
                    usage=USAGE,
                ),
            )


def measure(tracing: Tracing, n: int, flush: Callable[[], Any]) -> tuple[float, float]:
    """(request-thread CPU µs, process CPU µs) per request. Every ``BATCH`` requests the
    request thread sleeps ``PAUSE`` s, as a server between bursts would, so the exporter thread
    sends the batch (in its own thread) and no span is dropped from a full queue."""
    thread0, cpu0 = time.thread_time(), time.process_time()
    for done in range(1, n + 1):
        one_request(tracing)
        if done % BATCH == 0:
            time.sleep(PAUSE)
    flush()
    thread, cpu = time.thread_time() - thread0, time.process_time() - cpu0
    return thread / n * 1e6, cpu / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5120)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    port = free_port()
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER, str(port)])
    try:
        time.sleep(0.5)
        off = Tracing()
        on = Tracing(langfuse=langfuse_exporter(f"http://127.0.0.1:{port}", "pk", "sk"))
        results: dict[str, list[tuple[float, float]]] = {"off": [], "langfuse": []}
        one_request(on)  # warm-up: imports, first connection
        on.flush()
        for r in range(args.rounds):
            order = [("off", off, lambda: None), ("langfuse", on, on.flush)]
            for name, tracing, flush in order if r % 2 == 0 else order[::-1]:
                results[name].append(measure(tracing, args.requests, flush))
        on.shutdown()
    finally:
        receiver.terminate()
        receiver.wait()
    best = {
        name: (min(w for w, _ in runs), min(c for _, c in runs)) for name, runs in results.items()
    }
    print(f"{args.requests} requests x {args.rounds} rounds (best round)")
    print(f"{'tracing':<10} {'request-thread CPU µs':>22} {'process CPU µs':>16}")
    for name, (wall, cpu) in best.items():
        print(f"{name:<10} {wall:>22.2f} {cpu:>16.2f}")
    (off_wall, off_cpu), (on_wall, on_cpu) = best["off"], best["langfuse"]
    print(
        f"Langfuse adds {on_wall - off_wall:.1f} µs on the request thread and "
        f"{on_cpu - off_cpu:.1f} µs of CPU in all (export included) per request"
    )


if __name__ == "__main__":
    main()
