"""`deja tune` against an exhaustive sweep, the tuned cell against vLLM's defaults, and deja's
prefix routing against round robin on replicas tuned to the RAG profile -- side by side, ONE run.

1. **Tune vs exhaustive** (per profile workload, default chat and rag): `deja tune`'s default
   grid (5 x 5, `--requests 300` measured completions per cell) against a denser sweep (8 x 6
   cells, twice the measured completions). Tune's pick is scored by the sweep's own measurement
   of that cell, so both sides are judged by the same figure: **pick / best** (target >= 0.95),
   and the wall time of each.
2. **Tuned vs vLLM defaults** (max-num-seqs 1024, max-num-batched-tokens 8192) on the same
   workload and budget as the sweep: output tok/s, TTFT p99, preemptions.
3. **RAG routing**: `bench/routing.py` (4 replicas, Zipf over shared ~2,500-token system
   prompts) with `round_robin` and bounded `prefix`, the replicas running the rag profile's
   limits (64 seqs, 32,768 tokens) and the H100 step model; prefix-cache hit rate, TTFT p50/p90.

Sections 1 and 2 run the simulator's scheduler in simulated time (`deja tune --in-process`, GPU
profile `--gpu`): their throughput and latencies are modelled GPU time, and wall time is this
machine's. Section 3 runs real `deja sim` processes over HTTP in real time (x `--speed`), through
a real gateway. The replicas are SIMULATED throughout. Writes `bench/results/tune.json`.

    PYTHONPATH=. .venv/bin/python bench/tune.py [--profiles rag,chat] [--skip-routing]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import BENCH_DIR, RESULTS_DIR, banner, load_note, pinning_note, ratio, table

from sim.gpus import GPU_PROFILES
from tuning.grid import DEFAULT_SEQS, DEFAULT_TOKENS, Cell, CellResult, recommend
from tuning.inprocess import InProcessRunner
from tuning.profiles import VllmProfile, get_profile
from tuning.workload import LengthDist, Workload

DENSE_SEQS = (16, 32, 48, 64, 96, 128, 256, 512)
DENSE_TOKENS = (2048, 4096, 8192, 16384, 32768, 65536)
VLLM_DEFAULTS = Cell(1024, 8192)
TARGET = 0.95


def workload_of(profile: VllmProfile, seed: int) -> Workload:
    assert profile.workload is not None
    w = profile.workload
    return Workload(
        LengthDist.parse(w.prompt_tokens), LengthDist.parse(w.output_tokens), w.concurrency,
        profile.max_model_len, seed, f"profile:{profile.name}",
    )  # fmt: skip


def runner_for(profile: VllmProfile, args: argparse.Namespace, measured: int) -> InProcessRunner:
    workload = workload_of(profile, args.seed)
    fields = {"gpu": args.gpu, **{k: v for k, v in profile.sim_fields().items()
                                 if k in ("enable_prefix_caching", "kv_cache_dtype")}}  # fmt: skip
    return InProcessRunner(fields, workload, measured=measured, warmup=workload.concurrency // 2)


def sweep(runner: InProcessRunner, cells: list[Cell]) -> tuple[dict[Cell, CellResult], float]:
    started = time.monotonic()
    out = {cell: asyncio.run(runner.run(cell, 600.0)) for cell in cells}
    return out, time.monotonic() - started


def grid(seqs: tuple[int, ...], tokens: tuple[int, ...]) -> list[Cell]:
    return [Cell(s, t) for t in tokens for s in seqs]


def compare(profile_name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Sections 1 and 2 for one profile's workload."""
    profile = get_profile(profile_name)
    banner(f"{profile.name}: deja tune (default grid) vs an exhaustive sweep")
    tune_runner = runner_for(profile, args, args.requests)
    tune_results, tune_wall = sweep(tune_runner, grid(DEFAULT_SEQS, DEFAULT_TOKENS))
    pick = recommend(list(tune_results.values()), None)
    assert pick is not None
    dense_runner = runner_for(profile, args, 2 * args.requests)
    dense_cells = sorted(set(grid(DENSE_SEQS, DENSE_TOKENS)) | {VLLM_DEFAULTS, pick.cell},
                         key=lambda c: (c.tokens, c.seqs))  # fmt: skip
    dense, dense_wall = sweep(dense_runner, dense_cells)
    exhaustive = {c: r for c, r in dense.items() if c != VLLM_DEFAULTS}
    best = max(exhaustive.values(), key=lambda r: r.throughput)
    scored = dense[pick.cell]
    defaults = dense[VLLM_DEFAULTS]
    result = {
        "workload": tune_runner.workload.describe(),
        "tune": {"cells": len(tune_results), "requests": args.requests,
                 "wall_s": round(tune_wall, 1), "pick": pick.as_dict(),
                 "pick_scored_by_sweep": scored.as_dict()},
        "exhaustive": {"cells": len(exhaustive), "requests": 2 * args.requests,
                       "wall_s": round(dense_wall, 1), "best": best.as_dict()},
        "pick_over_best": round(ratio(scored.throughput, best.throughput), 4),
        "vllm_defaults": defaults.as_dict(),
        "tuned_over_defaults": round(ratio(scored.throughput, defaults.throughput), 4),
        "surface": {f"{c.seqs}x{c.tokens}": r.throughput for c, r in sorted(dense.items(),
                    key=lambda kv: (kv[0].tokens, kv[0].seqs))},
    }  # fmt: skip
    print_comparison(profile.name, result, scored, best, defaults)
    return result


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def print_comparison(
    name: str, r: dict[str, Any], scored: CellResult, best: CellResult, defaults: CellResult
) -> None:
    rows = [
        [f"tune pick {scored.seqs} x {scored.tokens}", f"{scored.throughput:,.0f}",
         _ms(scored.ttft_p99_ms), _ms(scored.itl_p99_ms), f"{scored.preemptions_per_min:g}",
         scored.preemptions],
        [f"exhaustive best {best.seqs} x {best.tokens}", f"{best.throughput:,.0f}",
         _ms(best.ttft_p99_ms), _ms(best.itl_p99_ms), f"{best.preemptions_per_min:g}",
         best.preemptions],
        [f"vLLM defaults {defaults.seqs} x {defaults.tokens}", f"{defaults.throughput:,.0f}",
         _ms(defaults.ttft_p99_ms), _ms(defaults.itl_p99_ms),
         f"{defaults.preemptions_per_min:g}", defaults.preemptions],
    ]  # fmt: skip
    print(table(["cell (seqs x tokens)", "tok/s", "TTFT p99 ms", "ITL p99 ms", "preempt/min",
                 "preemptions"], rows))  # fmt: skip
    verdict = "PASS" if r["pick_over_best"] >= TARGET else "BELOW TARGET"
    speedup = ratio(r["exhaustive"]["wall_s"], r["tune"]["wall_s"])
    print(
        f"  pick / best = {r['pick_over_best']:.3f} (target >= {TARGET}) -> {verdict}; wall: tune "
        f"{r['tune']['wall_s']} s ({r['tune']['cells']} cells x {r['tune']['requests']}), "
        f"exhaustive {r['exhaustive']['wall_s']} s ({r['exhaustive']['cells']} cells x "
        f"{r['exhaustive']['requests']}) = {speedup:.1f}x"
    )
    print(f"  tuned / vLLM defaults: {r['tuned_over_defaults']:.3f}x throughput")


def routing(args: argparse.Namespace) -> dict[str, Any]:
    """Section 3: bench/routing.py with the rag profile's limits and the H100 step model."""
    rag = get_profile("rag")
    costs = GPU_PROFILES[args.gpu].sim_fields(batched_tokens=rag.max_num_batched_tokens)
    output = RESULTS_DIR / "tune_rag_routing.json"
    extra = (f"--max-num-batched-tokens {rag.max_num_batched_tokens} "
             f"--decode-ms-per-seq {costs['decode_ms_per_seq']} "
             f"--kv-read-ms-per-token {costs['kv_read_ms_per_token']}")  # fmt: skip
    cmd = [
        sys.executable, str(BENCH_DIR / "routing.py"),
        "--max-num-seqs", str(rag.max_num_seqs), "--sim-extra", extra,
        "--base-ttft-ms", "0", "--prefill-ms-per-token", str(costs["prefill_ms_per_token"]),
        "--decode-ms-per-token", str(costs["decode_ms_per_token"]),
        "--requests", str(args.routing_requests), "--warmup-requests", str(args.routing_warmup),
        "--skip", "least_loaded", "--skip", "prefix_unbounded", "--skip", "ideal",
        "--skip", "hot", "--output", str(output),
    ]  # fmt: skip
    banner("rag: prefix routing vs round robin (bench/routing.py, replicas with the rag limits)")
    print("  $ " + shlex.join(cmd))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-3000:])
        raise SystemExit(f"bench/routing.py failed ({done.returncode})")
    data = json.loads(output.read_text())
    configs = data["configs"]
    rows, out = [], {"command": shlex.join(cmd), "replicas": data["meta"]["replicas"]}
    for key in ("round_robin", "prefix_bounded"):
        c = configs[key]
        keys = ("hit_rate", "ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99", "replica_ttft_ms_p50",
                "replica_ttft_ms_p90")  # fmt: skip
        out[key] = {k: c.get(k) for k in keys}
        rows.append([key, f"{c.get('hit_rate', 0):.3f}", _ms(c.get("ttft_ms_p50")),
                     _ms(c.get("ttft_ms_p90")), _ms(c.get("ttft_ms_p99"))])  # fmt: skip
    print(table(["policy", "prefix hit rate", "TTFT p50 ms", "TTFT p90 ms", "TTFT p99 ms"], rows))
    rr, px = out["round_robin"], out["prefix_bounded"]
    out["hit_ratio"] = round(ratio(px["hit_rate"], rr["hit_rate"]), 3)
    out["ttft_p50_ratio"] = round(ratio(px["ttft_ms_p50"], rr["ttft_ms_p50"]), 3)
    print(f"  prefix / round robin: hit rate {out['hit_ratio']:.2f}x, TTFT p50 "
          f"{out['ttft_p50_ratio']:.2f}x")  # fmt: skip
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--profiles", default="rag,chat", help="profile workloads of sections 1-2 ('': none)"
    )
    parser.add_argument("--gpu", default="h100-llama8b", choices=list(GPU_PROFILES))
    parser.add_argument("--requests", type=int, default=300, help="tune's per-cell budget (300)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-routing", action="store_true", help="skip section 3")
    parser.add_argument("--routing-requests", type=int, default=400)
    parser.add_argument("--routing-warmup", type=int, default=200)
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "tune.json")
    args = parser.parse_args()
    print("deja tune benchmark -- the replicas are SIMULATED (deja sim)")
    print(pinning_note())
    print(load_note())
    started = time.monotonic()
    results: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    for name in filter(None, (p.strip() for p in args.profiles.split(","))):
        results[name] = compare(name, args)
    if not args.skip_routing:
        results["rag_routing"] = routing(args)
    results["wall_s"] = round(time.monotonic() - started, 1)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1) + "\n")
    print(f"\nresults written to {args.output} (wall time {results['wall_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
