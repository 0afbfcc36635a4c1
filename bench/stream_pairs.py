"""Two code trees, the streamed miss through uvicorn, in paired process starts.

    .venv/bin/python bench/stream_pairs.py --base /tmp/deja-base [--pairs 10] [--requests 150]

``trees.py`` runs the whole ``gateway_paths.py`` per tree, so each tree gets a few gateway
processes. On this machine the CPU per streamed request of one tree moves by ±25% from one
gateway process to the next (measured: 3,438-5,625 µs for the same tree in one run), more than
the difference being looked for. Here one SIMULATED replica (this tree's simulator) serves both
trees, and each pair starts a gateway of each tree in turn (A B, then B A), pinned to the
server's CPU, and sends ``--requests`` sequential streamed misses (``Cache-Control: no-cache,
no-store``) over one connection from ``stream_client.py``. The figure is the gateway's CPU per
request (``/proc``, warm-up included) and, per pair, after/before: read the median of the pair
ratios and their spread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

from common import (
    LOADGEN_CPU,
    SERVER_CPU,
    cpu_seconds,
    log_dir,
    run_json_command,
    start_gateway,
    start_sim,
    stop_process,
)
from gateway_paths import CHAT, NO_CACHE, chat_body

BENCH_DIR = Path(__file__).resolve().parent
WARMUP = 10
SIM_ARGS = ["--speed", "1", "--base-ttft-ms", "0", "--prefill-ms-per-token", "0"]


def one_gateway(tree: Path | None, sim_url: str, body: Path, requests: int) -> float:
    """CPU µs per streamed request of one fresh gateway of ``tree`` (None: this checkout)."""
    saved = os.environ.get("PYTHONPATH")
    if tree is not None:
        os.environ["PYTHONPATH"] = str(tree) + os.pathsep + (saved or "")
    try:
        gateway = start_gateway("gateway-pair", [sim_url], cpu=SERVER_CPU)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    client = [sys.executable, str(BENCH_DIR / "stream_client.py"), "--body", str(body)]
    client += ["--header", f"Cache-Control: {NO_CACHE}", "--warmup", str(WARMUP)]
    try:
        before = cpu_seconds(gateway.popen.pid)
        run_json_command(
            [*client, "--url", gateway.url + CHAT, "--requests", str(requests)],
            cpu=LOADGEN_CPU,
            timeout=60.0 + requests * 2.0,
        )
        spent = cpu_seconds(gateway.popen.pid) - before
    finally:
        stop_process(gateway)
    return spent / (requests + WARMUP) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--base", type=Path, required=True, help="the other code tree (before)")
    parser.add_argument("--pairs", type=int, default=10, help="gateway pairs (default 10)")
    parser.add_argument("--requests", type=int, default=150, help="per gateway (default 150)")
    parser.add_argument("--decode-ms", type=float, default=2.0, help="per token (default 2)")
    args = parser.parse_args()
    body = log_dir() / "stream_pairs_body.json"
    body.write_bytes(chat_body(stream=True))
    sim = start_sim(
        "sim-pairs", cpu=LOADGEN_CPU, args=[*SIM_ARGS, "--decode-ms-per-token", str(args.decode_ms)]
    )
    trees = {"before": args.base.resolve(), "after": None}
    cpu: dict[str, list[float]] = {"before": [], "after": []}
    try:
        for index in range(args.pairs):
            order = ["before", "after"] if index % 2 == 0 else ["after", "before"]
            for label in order:
                cpu[label].append(one_gateway(trees[label], sim.url, body, args.requests))
            print(
                f"pair {index}: before {cpu['before'][-1]:,.0f} us, after {cpu['after'][-1]:,.0f}"
                f" us per streamed request ({order[0]} first)",
                flush=True,
            )
    finally:
        stop_process(sim)
    ratios = [a / b for a, b in zip(cpu["after"], cpu["before"], strict=True)]
    result = {
        "cpu_us_before": cpu["before"],
        "cpu_us_after": cpu["after"],
        "pair_ratios": ratios,
        "median_pair_ratio": statistics.median(ratios),
        "ratio_of_medians": statistics.median(cpu["after"]) / statistics.median(cpu["before"]),
    }
    print(
        f"\nafter/before CPU per streamed request, replica SIMULATED: median of {len(ratios)} pair "
        f"ratios {result['median_pair_ratio']:.3f} (range {min(ratios):.2f}-{max(ratios):.2f}), "
        f"ratio of medians {result['ratio_of_medians']:.3f}"
    )
    (BENCH_DIR / "results" / "stream_pairs.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
