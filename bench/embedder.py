"""Embedder latency and throughput: both model variants, micro-batching on and off.

* **latency**: one ~20-token query at a time, one ONNX Runtime thread, for the re-quantised
  model (``dynint8``, shipped default) and the package's file as shipped (``int8``, fp32
  arithmetic), side by side in interleaved rounds: the compute alone (tokenise, run, pool, in
  this thread) and ``await embed()`` through each batching mode (executor hop included).
  ``CPU p50`` is the process CPU time per call: on a busy machine, a steadier estimate of the
  latency on an idle core than the wall clock. Target: p50 <= 4 ms for the shipped default.
* **throughput**: 16 tasks call ``await embed()`` back to back on Quora questions (realistic
  lengths) with batching off (one executor call per text), natural batching (no added wait:
  texts queued while a batch runs go in the next one), fixed-wait batching (an idle batcher's
  first text waits ``--wait-ms`` for company) and natural batching with padded batches (one
  padded run per batch instead of one run per text). ``CPU ms/text`` is the process CPU time
  (all threads) per text, robust to other load.

    .venv/bin/python bench/embedder.py [--requests 1600] [--latency-runs 600] [--rounds 2]

Writes bench/results/embedder.json. Figures come from a shared 2-core machine: see the load
note printed with them, and re-run if they look noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import onnxruntime  # type: ignore[import-untyped]
from common import RESULTS_DIR, banner, load_note, percentile, table, verdict

from deja.embedding.onnx.embedder import OnnxEmbedder, Variant, load_onnx_embedder

QUERY = "How do I configure the retry policy of the agent when the upstream server times out?"
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared/data/qqp_dev.jsonl"
TARGET_P50_MS = 4.0
VARIANTS: tuple[Variant, ...] = ("dynint8", "int8")


@dataclass(frozen=True)
class Mode:
    """A way of sending texts through ``embed()``."""

    name: str
    batching: bool
    wait_ms: float = 0.0
    padded: bool = False


def modes(wait_ms: float) -> list[Mode]:
    return [
        Mode("off", batching=False),
        Mode("natural", batching=True),
        Mode(f"fixed-{wait_ms:g}ms", batching=True, wait_ms=wait_ms),
        Mode("natural-padded", batching=True, padded=True),
    ]


def load(variant: Variant, mode: Mode, cache_dir: Path, batch_max: int) -> OnnxEmbedder:
    embedder = load_onnx_embedder(
        cache_dir,
        threads=1,
        variant=variant,
        batching=mode.batching,
        batch_max=batch_max,
        batch_wait_ms=mode.wait_ms,
        padded_batches=mode.padded,
    )
    if not embedder.model_id.endswith(variant):
        raise SystemExit(f"asked for {variant}, got {embedder.model_id} (see the log)")
    return embedder


def ms_stats(samples: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples]
    return {
        "n": len(ms),
        "p50": percentile(ms, 50),
        "p90": percentile(ms, 90),
        "p99": percentile(ms, 99),
        "mean": statistics.fmean(ms),
    }


async def time_calls(
    call: Callable[[], Awaitable[object]], runs: int
) -> tuple[list[float], list[float]]:
    """Wall-clock and process CPU seconds of each of ``runs`` sequential calls. One call at a
    time keeps one thread busy, so its CPU time is what it would take on an idle core."""
    wall, cpu = [], []
    for _ in range(runs):
        cpu_started = time.process_time()
        started = time.perf_counter()
        await call()
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
    return wall, cpu


async def latency(args: argparse.Namespace, cache_dir: Path) -> dict[str, Any]:
    """Sequential single-query latency, interleaved over variants and modes."""
    targets: dict[str, Callable[[], Awaitable[object]]] = {}
    embedders: list[OnnxEmbedder] = []
    for variant in VARIANTS:
        for mode in modes(args.wait_ms)[:3]:
            embedder = load(variant, mode, cache_dir, args.batch_max)
            embedders.append(embedder)
            if mode.name == "off":
                encoder = embedder._encoder

                async def compute(encoder: Any = encoder) -> object:
                    return encoder.one(QUERY)

                targets[f"{variant} compute"] = compute
            targets[f"{variant} embed() {mode.name}"] = partial(embedder.embed, QUERY)
    samples: dict[str, list[float]] = {name: [] for name in targets}
    cpu: dict[str, list[float]] = {name: [] for name in targets}
    per_round = max(1, args.latency_runs // args.rounds)
    for call in targets.values():
        await time_calls(call, 30)  # warm-up
    for _ in range(args.rounds):
        for name, call in targets.items():
            wall, used = await time_calls(call, per_round)
            samples[name] += wall
            cpu[name] += used
    for embedder in embedders:
        await embedder.close()
    return {
        name: {**ms_stats(s), "cpu_p50": ms_stats(cpu[name])["p50"]} for name, s in samples.items()
    }


async def throughput_run(
    embedder: OnnxEmbedder, texts: list[str], requests: int, tasks: int
) -> tuple[float, list[float]]:
    """``tasks`` workers embed ``requests`` texts in all; returns (seconds, per-call samples)."""
    next_index = 0
    samples: list[float] = []

    async def worker() -> None:
        nonlocal next_index
        while next_index < requests:
            text = texts[next_index % len(texts)]
            next_index += 1
            started = time.perf_counter()
            await embedder.embed(text)
            samples.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(tasks)))
    return time.perf_counter() - started, samples


@dataclass
class Run:
    """One mode's embedder and what its rounds measured."""

    embedder: OnnxEmbedder
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    samples: list[float] = field(default_factory=list)


async def throughput(
    args: argparse.Namespace, cache_dir: Path, texts: list[str]
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for variant in VARIANTS:
        requests = args.requests if variant == "dynint8" else max(16, args.requests // 3)
        runs: dict[Mode, Run] = {}
        for mode in modes(args.wait_ms):
            embedder = load(variant, mode, cache_dir, args.batch_max)
            await throughput_run(embedder, texts, 64, args.concurrency)  # warm-up
            if embedder.batcher is not None:
                embedder.batcher.batch_sizes.clear()
            runs[mode] = Run(embedder)
        per_round = max(args.concurrency, requests // args.rounds)
        for _ in range(args.rounds):
            for run in runs.values():
                cpu_started = time.process_time()
                seconds, samples = await throughput_run(
                    run.embedder, texts, per_round, args.concurrency
                )
                run.cpu_seconds += time.process_time() - cpu_started
                run.seconds += seconds
                run.samples += samples
        for mode, run in runs.items():
            batcher = run.embedder.batcher
            sizes = batcher.batch_sizes if batcher is not None else None
            mean_batch = (
                sum(k * v for k, v in sizes.items()) / sum(sizes.values()) if sizes else 1.0
            )
            rows.append(
                {
                    "variant": variant,
                    "mode": mode.name,
                    "texts_per_s": len(run.samples) / run.seconds,
                    "cpu_ms_per_text": 1000 * run.cpu_seconds / len(run.samples),
                    "mean_batch": mean_batch,
                    "latency_ms": ms_stats(run.samples),
                }
            )
            await run.embedder.close()
    return rows


def load_texts(path: Path) -> list[str]:
    if not path.exists():
        print(f"  {path} not found: using a synthetic set of questions")
        return [f"{QUERY} (variant {i})" for i in range(500)]
    texts = []
    with path.open() as handle:
        for line in handle:
            row = json.loads(line)
            texts += [row["a"], row["b"]]
    return texts


async def run(args: argparse.Namespace) -> dict[str, Any]:
    cache_dir = args.cache_dir
    probe = load("dynint8", Mode("off", batching=False), cache_dir, args.batch_max)
    tokens = len(probe._encoder.tokenizer.encode(QUERY).ids)
    await probe.close()
    banner(f"latency, one query of {tokens} tokens at a time, 1 thread (ms)")
    lat = await latency(args, cache_dir)
    print(
        table(
            ["target", "p50", "p90", "p99", "mean", "CPU p50"],
            [
                [name, s["p50"], s["p90"], s["p99"], s["mean"], s["cpu_p50"]]
                for name, s in sorted(lat.items(), key=lambda kv: kv[0])
            ],
            digits=2,
        )
    )
    shipped = lat["dynint8 embed() off"]
    print(
        f"  shipped default embed() p50 {shipped['p50']:.2f} ms (CPU {shipped['cpu_p50']:.2f} ms):"
        f" {verdict(shipped['p50'] <= TARGET_P50_MS)}"
    )
    banner(f"throughput, {args.concurrency} concurrent tasks through embed(), 1 thread")
    texts = load_texts(args.data)
    thr = await throughput(args, cache_dir, texts)
    print(
        table(
            ["variant", "mode", "texts/s", "CPU ms/text", "mean batch", "p50 ms", "p99 ms"],
            [
                [
                    r["variant"],
                    r["mode"],
                    r["texts_per_s"],
                    r["cpu_ms_per_text"],
                    r["mean_batch"],
                    r["latency_ms"]["p50"],
                    r["latency_ms"]["p99"],
                ]
                for r in thr
            ],
            digits=2,
        )
    )
    return {"query_tokens": tokens, "latency_ms": lat, "throughput": thr}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1600, help="texts per throughput run")
    parser.add_argument("--latency-runs", type=int, default=600, help="queries per target")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--batch-max", type=int, default=16)
    parser.add_argument("--wait-ms", type=float, default=2.0, help="fixed-wait mode's wait")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="texts (qqp jsonl)")
    parser.add_argument(
        "--cache-dir", type=Path, default=RESULTS_DIR / "models", help="derived model cache"
    )
    args = parser.parse_args()
    try:
        import uvloop

        runner: Callable[[Any], Any] = uvloop.run
        loop_name = "uvloop"
    except ImportError:  # pragma: no cover
        runner = asyncio.run
        loop_name = "asyncio"
    before = load_note()
    print(before)
    results = runner(run(args))
    after = load_note()
    print(f"\n{after}")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / "embedder.json"
    payload = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": sys.version.split()[0],
        "onnxruntime": onnxruntime.__version__,
        "machine": platform.machine(),
        "loop": loop_name,
        "load_before": before,
        "load_after": after,
        "args": {k: str(v) for k, v in vars(args).items()},
        **results,
    }
    out.write_text(json.dumps(payload, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
