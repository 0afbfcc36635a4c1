"""The gateway's own CPU per exact hit, in-process: the ASGI app called directly (no sockets, no
uvicorn, no load generator), so the figure is the gateway's work alone and barely moves with
other load on the machine. Side by side in one run: the request memo on and off.

    .venv/bin/python bench/hot_path.py [--requests 3000] [--rounds 5]

Thread CPU time per request, the best round of ``--rounds`` (the least disturbed one) and the
median. The replica is SIMULATED (``deja sim`` in-process) and only answers the priming miss.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))

from common import asgi_call, asgi_scope  # noqa: E402

from app.main import create_app  # noqa: E402
from config.settings import Settings  # noqa: E402
from sim.config import SimConfig  # noqa: E402
from sim.runner import start_simulators  # noqa: E402

BODY = json.dumps(
    {
        "model": "deja-sim-1",
        "messages": [{"role": "user", "content": "deja bench: the exact-hit path"}],
        "max_tokens": 32,
    },
    separators=(",", ":"),
).encode()
SCOPE = asgi_scope(BODY)


async def one(app: Any) -> list[dict[str, Any]]:
    """One exact-hit request through the ASGI app; returns what it sent."""
    return await asgi_call(app, BODY, SCOPE)


async def measure(
    label: str, settings: dict[str, Any], args: argparse.Namespace, sink: Any
) -> list[float]:
    """Thread CPU µs per exact hit, per round; the access log is written (to ``sink``)."""
    app = create_app(Settings(**settings), access_sink=sink)
    async with app.api.router.lifespan_context(app.api):
        await one(app)
        await app.state.gateway.pipeline.drain()
        answer = await one(app)
        cache = dict(answer[0]["headers"]).get(b"x-deja-cache")
        if cache != b"exact":
            raise SystemExit(f"{label}: expected an exact hit, got {cache!r}")
        for _ in range(200):  # warm-up
            await one(app)
        rounds = []
        for _ in range(args.rounds):
            started = time.thread_time()
            for _ in range(args.requests):
                await one(app)
            rounds.append((time.thread_time() - started) / args.requests * 1e6)
    return rounds


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sims = await start_simulators(1, SimConfig(speed=0))
    results: dict[str, Any] = {}
    sink = open(os.devnull, "wb")  # noqa: ASYNC230, SIM115 (opening /dev/null never blocks)
    try:
        with tempfile.TemporaryDirectory(prefix="deja-hot-path-") as tmp:
            base = {
                "replicas": sims.urls,
                "semantic_enabled": False,
                "access_log": True,
                "log_level": "warning",
            }
            variants = {
                "memo on (default)": {},
                "memo off": {"request_memo_entries": 0},
            }
            for index in range(2):  # interleaved: A B, then B A
                order = list(variants.items())
                for label, extra in order if index == 0 else reversed(order):
                    data_dir = Path(tmp) / f"{len(results)}-{index}"
                    settings = {**base, **extra, "data_dir": data_dir}
                    rounds = await measure(label, settings, args, sink)
                    results.setdefault(label, []).extend(rounds)
    finally:
        sink.close()
        await sims.stop()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=3000, help="requests per round (3000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per variant and pass (5)")
    args = parser.parse_args()
    import logging

    logging.disable(logging.WARNING)
    results = asyncio.run(run(args))
    print("gateway CPU per exact hit, in-process (thread time; the replica is SIMULATED)")
    print(f"{'variant':<20} {'best us':>8} {'median us':>10}  rounds")
    for label, rounds in results.items():
        shown = ", ".join(f"{r:.1f}" for r in rounds)
        print(f"{label:<20} {min(rounds):>8.1f} {statistics.median(rounds):>10.1f}  {shown}")
    on, off = min(results["memo on (default)"]), min(results["memo off"])
    print(f"memo on / memo off (best rounds): {on / off:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
