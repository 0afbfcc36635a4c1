"""Exact-hit latency with and without three concurrent 4 MB request bodies (issue 19, finding
11), side by side in ONE run.

One gateway (``deja serve``, defaults but the semantic layer off: see below) pinned to cpu 0,
one SIMULATED replica (``deja sim --speed 0``) and the load on cpu 1 where pinning is possible.
A measuring client sends the same small chat request over one keep-alive connection, one after
the other (every answer is ``X-Deja-Cache: exact``, checked). Rounds alternate two phases:

* quiet: the exact hits alone;
* bodies: a sender PROCESS of its own keeps ``--senders`` (3) requests of ``--body-mb`` (4 MB)
  in flight at once, each a chat request with its own 4 MB question (no two alike, so none is
  a memo or exact hit: each is read, validated, hashed and sent to the replica, whose answer
  is relayed: the simulated model's 8,192-token context refuses it with a 400, after the
  gateway has done all its work on it), while the same exact hits are measured.

Figures per phase: exact-hit p50/p99/max, and how many 4 MB bodies were answered per second
(by status; a name instead of a status: no answer);
and p99 bodies/quiet. Before issue 19 a body was parsed and hashed on the event loop (the issue
measured p99 4.9 → 51 ms); bodies over 256 KB now go to a worker thread
(``middleware.admit.OFF_LOOP_BODY_BYTES``).

The semantic layer is off by default (``--semantic`` turns it on): with it on, every 4 MB
question is also embedded (its first 16 KiB, ~0.2 s of the embedder's CPU), which measures the
embedder's share of 2 cores, not the body path.

    .venv/bin/python bench/large_bodies.py [--rounds 2] [--seconds 5] [--semantic]

About a minute. Writes ``bench/results/large_bodies.json``. All traffic goes to 127.0.0.1; the
machine may be shared: read the ratio.
"""

from __future__ import annotations

import argparse
import collections
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import (
    LOADGEN_CPU,
    REPO_ROOT,
    SERVER_CPU,
    load_note,
    percentile,
    pinned,
    pinning_note,
    start_gateway,
    start_sim,
    stop_all,
    table,
)

MODEL = "deja-sim-1"
HIT = {"model": MODEL, "messages": [{"role": "user", "content": "What is deja?"}]}
#: A sender stops by itself after this long (a bounded loop), if the bench has not stopped it.
SENDER_SECONDS_MAX = 300.0


# --- the sender: its own process, ``senders`` threads each keeping one big body in flight ----


def send_bodies(url: str, senders: int, size: int) -> None:
    """Until SIGTERM: ``senders`` threads post 4 MB chat requests back to back; prints how
    many got an answer by status, and how many got none."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    filler = b"lorem ipsum dolor sit amet " * (size // 27 + 1)
    statuses: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()

    def sender(index: int) -> None:
        with httpx.Client(timeout=60) as http:
            n = 0
            while not stop.is_set():
                n += 1
                head = f'{{"model":"{MODEL}","messages":[{{"role":"user","content":"{index}-{n} '
                tail = '"}]}'
                body = head.encode() + filler[: size - len(head) - len(tail)] + tail.encode()
                try:
                    reply = http.post(
                        url + "/v1/chat/completions",
                        content=body,
                        headers={"content-type": "application/json"},
                    )
                    status = str(reply.status_code)
                except httpx.HTTPError as exc:
                    status = type(exc).__name__
                with lock:
                    statuses[status] += 1

    threads = [threading.Thread(target=sender, args=(i,), daemon=True) for i in range(senders)]
    for thread in threads:
        thread.start()
    stop.wait(SENDER_SECONDS_MAX)
    stop.set()
    for thread in threads:
        thread.join(60)
    print(json.dumps(dict(statuses)), flush=True)


def start_sender(url: str, args: Any) -> subprocess.Popen[str]:
    cmd = [sys.executable, __file__, "--sender", url, "--senders", str(args.senders)]
    cmd += ["--body-mb", str(args.body_mb)]
    return subprocess.Popen(pinned(cmd, LOADGEN_CPU), stdout=subprocess.PIPE, text=True)


# --- the measuring client -----------------------------------------------------------------


def hits(http: httpx.Client, url: str, seconds: float) -> tuple[list[float], int]:
    """Exact hits one after the other for ``seconds``: latencies (s) and non-exact answers."""
    latencies, wrong = [], 0
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        started = time.perf_counter()
        reply = http.post(url + "/v1/chat/completions", json=HIT)
        latencies.append(time.perf_counter() - started)
        wrong += reply.status_code != 200 or reply.headers.get("x-deja-cache") != "exact"
    return latencies, wrong


def phase(http: httpx.Client, url: str, args: Any, bodies: bool) -> dict[str, Any]:
    sender = start_sender(url, args) if bodies else None
    if sender is not None:
        time.sleep(1.5)  # the first bodies are in flight
    started = time.monotonic()
    latencies, wrong = hits(http, url, args.seconds)
    elapsed = time.monotonic() - started
    statuses: dict[str, int] = {}
    if sender is not None:
        sender.terminate()
        out, _ = sender.communicate(timeout=120)
        statuses = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    return {"latencies": latencies, "wrong": wrong, "elapsed": elapsed, "statuses": statuses}


def summary(name: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    latencies = [x for run in runs for x in run["latencies"]]
    statuses: collections.Counter[str] = collections.Counter()
    for run in runs:
        statuses.update(run["statuses"])
    answered = sum(n for status, n in statuses.items() if status.isdigit())
    elapsed = sum(run["elapsed"] for run in runs)
    return {
        "phase": name,
        "hits": len(latencies),
        "p50_ms": 1000 * percentile(latencies, 50),
        "p99_ms": 1000 * percentile(latencies, 99),
        "max_ms": 1000 * max(latencies),
        "not_exact": sum(run["wrong"] for run in runs),
        "bodies_per_s": answered / elapsed if answered else 0.0,
        "body_statuses": " ".join(f"{k}:{v}" for k, v in sorted(statuses.items())) or "-",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="quiet/bodies pairs, alternated")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured per phase and round")
    parser.add_argument("--senders", type=int, default=3, help="big bodies in flight at once")
    parser.add_argument("--body-mb", type=float, default=4.0, help="size of each body, in MB")
    parser.add_argument("--semantic", action="store_true", help="leave the semantic layer on")
    parser.add_argument("--sender", help=argparse.SUPPRESS)  # the child's mode: gateway URL
    args = parser.parse_args()
    if args.sender is not None:
        send_bodies(args.sender, args.senders, int(args.body_mb * 1_000_000))
        return 0
    print(load_note())
    print(pinning_note())
    env = {"DEJA_ACCESS_LOG": "false", "DEJA_CORPORA_ENABLED": "false"}
    if not args.semantic:
        env["DEJA_SEMANTIC_ENABLED"] = "false"
    try:
        sim = start_sim("sim", cpu=LOADGEN_CPU)
        gateway = start_gateway("gateway", [sim.url], cpu=SERVER_CPU, env=env)
        quiet: list[dict[str, Any]] = []
        loaded: list[dict[str, Any]] = []
        with httpx.Client(timeout=30) as http:
            hits(http, gateway.url, 1.0)  # the first is a miss: stored, the rest exact
            for n in range(args.rounds):
                order = [False, True] if n % 2 == 0 else [True, False]
                for bodies in order:
                    (loaded if bodies else quiet).append(phase(http, gateway.url, args, bodies))
    finally:
        stop_all()
    rows = [summary("quiet", quiet), summary(f"{args.senders} x {args.body_mb:g} MB", loaded)]
    keys = [k for k in rows[0] if k != "phase"]
    print(table(["phase", *keys], [[r["phase"], *(r[k] for k in keys)] for r in rows], 1))
    ratio = rows[1]["p99_ms"] / rows[0]["p99_ms"]
    print(f"exact-hit p99 with the bodies / without: {ratio:.2f}")
    out = REPO_ROOT / "bench" / "results" / "large_bodies.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "phases": rows, "p99_ratio": ratio}, indent=2))
    ok = rows[0]["not_exact"] == 0 and rows[1]["not_exact"] == 0 and rows[1]["bodies_per_s"] > 0
    print("every hit exact, bodies answered:", "yes" if ok else "NO")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
