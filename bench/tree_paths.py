"""Two code trees side by side in ONE run, in-process: CPU per request on each gateway path.

    .venv/bin/python bench/tree_paths.py --base /tmp/deja-base [--requests 1500] [--rounds 4]

For each path (an exact hit; a forced JSON miss, ``Cache-Control: no-cache, no-store``; the same
miss streamed; ``stored``, a JSON miss the cache may store: a new question every request, so it
goes through single-flight and is written in the background) and each tree, a worker process
puts the tree first on ``sys.path``, builds the app with ``create_app`` and an in-process
simulated replica, and calls the ASGI app directly (no sockets to the client, no load
generator). The figure is the thread CPU time per request: the gateway's work, plus, on a miss,
the in-process simulator's answer and the loopback HTTP exchange with it — the same code in both
trees, so the difference is the gateway's. Thread time barely moves with other load on a shared
machine; workers alternate A B B A, and each tree's best and median rounds are printed. The
replica is SIMULATED.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import asgi_call, asgi_scope

BENCH_DIR = Path(__file__).resolve().parent
PATHS = ("exact", "miss", "stream", "stored")
NO_CACHE = b"no-cache, no-store"


def body(stream: bool, question: str = "deja bench: the gateway's paths") -> bytes:
    payload: dict[str, Any] = {
        "model": "deja-sim-1",
        "messages": [{"role": "user", "content": question}],
        "max_tokens": 32,
    }
    if stream:
        payload["stream"] = True
    return json.dumps(payload, separators=(",", ":")).encode()


def scope(raw: bytes, path: str) -> dict[str, Any]:
    """The request's scope; the forced miss paths ask the gateway not to read or write the cache."""
    return asgi_scope(raw, [(b"cache-control", NO_CACHE)] if path in ("miss", "stream") else [])


async def worker(path: str, requests: int, rounds: int, calls: bool = False) -> list[float]:
    """Thread CPU µs per request on ``path``, per round (this process's tree); with ``calls``,
    the Python function calls per request instead (cProfile's count: the same on a busy
    machine as on an idle one)."""
    from app.main import create_app
    from config.settings import Settings

    try:  # the simulator is top-level since issue 18; a tree from before has it in deja/
        from sim.config import SimConfig
        from sim.runner import start_simulators
    except ImportError:
        from deja.sim.config import SimConfig  # type: ignore[no-redef]
        from deja.sim.runner import start_simulators  # type: ignore[no-redef]

    sims = await start_simulators(1, SimConfig(speed=0))
    raw = body(stream=path == "stream")
    request_scope = scope(raw, path)
    expected = b"exact" if path == "exact" else b"miss"
    sink = open(os.devnull, "wb")  # noqa: ASYNC230, SIM115 (opening /dev/null never blocks)
    try:
        with tempfile.TemporaryDirectory(prefix="deja-tree-paths-") as tmp:
            options: dict[str, Any] = {
                "replicas": sims.urls,
                "semantic_enabled": False,
                "access_log": True,
                "log_level": "warning",
                "data_dir": Path(tmp),
            }
            app = create_app(Settings(**options), access_sink=sink)
            async with app.api.router.lifespan_context(app.api):
                await asgi_call(app, raw, request_scope)
                await app.state.gateway.pipeline.drain()
                check = body(False, "deja bench: the check") if path == "stored" else raw
                answer = await asgi_call(app, check, scope(check, path))
                cache = dict(answer[0]["headers"]).get(b"x-deja-cache")
                if cache != expected:
                    raise SystemExit(f"{path}: expected X-Deja-Cache {expected!r}, got {cache!r}")
                # "stored": a new question per request, its body and scope made beforehand
                sent = [(raw, request_scope)] * (100 + rounds * requests)
                if path == "stored":
                    raws = [body(False, f"deja bench: question {i}") for i in range(len(sent))]
                    sent = [(r, scope(r, path)) for r in raws]
                for r, s in sent[:100]:  # warm-up
                    await asgi_call(app, r, s)
                found = []
                for index in range(rounds):
                    await app.state.gateway.pipeline.drain()  # writes of the round before
                    batch = sent[100 + index * requests : 100 + (index + 1) * requests]
                    profile = cProfile.Profile() if calls else None
                    started = time.thread_time()
                    if profile is not None:
                        profile.enable()
                    for r, s in batch:
                        await asgi_call(app, r, s)
                    if profile is not None:
                        profile.disable()
                        counted = pstats.Stats(profile).stats.values()  # type: ignore[attr-defined]
                        found.append(sum(entry[1] for entry in counted) / requests)
                    else:
                        found.append((time.thread_time() - started) / requests * 1e6)
    finally:
        sink.close()
        await sims.stop()
    return found


def run_worker(tree: Path, path: str, requests: int, rounds: int, calls: bool) -> list[float]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", path, "--tree", str(tree)]
    cmd += ["--requests", str(requests), "--rounds", str(rounds)] + (["--calls"] if calls else [])
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"worker {path} on {tree} failed:\n{done.stderr[-2000:]}")
    found: list[float] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--base", type=Path, help="the other code tree (before)")
    parser.add_argument("--tree", type=Path, default=BENCH_DIR.parent, help=argparse.SUPPRESS)
    parser.add_argument("--worker", choices=PATHS, help=argparse.SUPPRESS)
    parser.add_argument("--requests", type=int, default=1500, help="requests per round (1500)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per worker (4)")
    parser.add_argument("--passes", type=int, default=2, help="workers per tree and path (2)")
    parser.add_argument(
        "--miss-requests",
        type=int,
        default=300,
        help="requests per round on the miss paths (300: each waits for the simulator)",
    )
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    parser.add_argument(
        "--calls",
        action="store_true",
        help="count Python function calls per request (cProfile) instead of CPU time",
    )
    args = parser.parse_args()
    if args.worker is not None:
        sys.path.insert(0, str(args.tree.resolve()))
        import logging

        logging.disable(logging.WARNING)
        rounds = asyncio.run(worker(args.worker, args.requests, args.rounds, args.calls))
        print(json.dumps(rounds))
        return 0
    if args.base is None:
        parser.error("--base is required")
    trees = {"before": args.base.resolve(), "after": args.tree.resolve()}
    found: dict[tuple[str, str], list[float]] = {}
    for path in args.paths:
        requests = args.requests if path == "exact" else args.miss_requests
        for index in range(args.passes):
            order = ["before", "after"] if index % 2 == 0 else ["after", "before"]
            for label in order:
                rounds = run_worker(trees[label], path, requests, args.rounds, args.calls)
                found.setdefault((path, label), []).extend(rounds)
                print(f"  {path:6} {label:6} " + ", ".join(f"{r:.1f}" for r in rounds), flush=True)
    unit = "Python function calls" if args.calls else "thread CPU us"
    print(f"\n{unit} per request, in-process (the replica is SIMULATED, in-process)")
    print(
        f"{'path':8} {'before best':>12} {'after best':>11} {'ratio':>7} {'before med':>11} "
        f"{'after med':>10} {'ratio':>7}"
    )
    table = []
    for path in args.paths:
        before, after = found[(path, "before")], found[(path, "after")]
        b_best, a_best = min(before), min(after)
        b_med, a_med = statistics.median(before), statistics.median(after)
        print(
            f"{path:8} {b_best:12.1f} {a_best:11.1f} {a_best / b_best:7.3f} {b_med:11.1f} "
            f"{a_med:10.1f} {a_med / b_med:7.3f}"
        )
        table.append({"path": path, "before": before, "after": after})
    out = BENCH_DIR / "results" / ("tree_paths_calls.json" if args.calls else "tree_paths.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(table, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
