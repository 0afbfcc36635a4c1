"""The embedder alone on corpus chunks: one text per ONNX run (what ingest does) against padded
batches of texts sorted by length, for both model variants, and whether a batched vector equals
the text's own.

Issue 21 asked whether ingest could embed at "the embedder's batch speed". The texts are the
chunks of the first ``--paragraphs`` WikiQA one-paragraph pages (``../shared/data``), chunked as
ingest chunks them (200 tokens). For each variant (``dynint8``: the re-quantised default;
``int8``: the package's file, fp32 arithmetic) every batch size runs in interleaved rounds on
the same texts; the best round's process CPU time per chunk is reported (one ONNX thread, so
CPU time is the compute alone, steadier than the wall clock on a busy machine), with its ratio
to the single-text runs and the worst ``1 - cosine`` between a text's batched and single vector.
Batches are sorted by token count, so padding is at most the gap between neighbours; the
attention mask keeps padding out of the pooling.

    .venv/bin/python bench/embed_chunks.py [--paragraphs 16] [--sizes 1 4 16 32] [--rounds 2]

About two minutes with the defaults (32 chunks) on a busy 2-core machine. Writes
bench/results/embed_chunks.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from common import RESULTS_DIR, banner, load_note, table
from corpus import MODEL_DIR, paragraph_files, parse_and_chunk

from deja.embedding.onnx.derive import load_dynint8
from deja.embedding.onnx.encoder import (
    DYNINT8_ID,
    INT8_ID,
    Encoder,
    load_tokenizer,
    make_session,
    source_model_path,
)


def encoder(variant: str) -> Encoder:
    tokenizer = load_tokenizer()
    if variant == "dynint8":
        return load_dynint8(source_model_path(), MODEL_DIR, tokenizer, 1)
    return Encoder(make_session(source_model_path(), threads=1), tokenizer)


def run(enc: Encoder, texts: list[str], order: list[int], size: int) -> tuple[np.ndarray, float]:
    """Every text's vector, ``size`` texts per run in ``order``; the CPU seconds it took."""
    started = time.process_time()
    if size == 1:
        out = enc.each(texts)
    else:
        out = np.empty((len(texts), enc.session.get_outputs()[0].shape[-1]), dtype=np.float32)
        for lo in range(0, len(order), size):
            picked = order[lo : lo + size]
            out[picked] = enc.padded([texts[i] for i in picked])
    return out, time.process_time() - started


def measure(variant: str, texts: list[str], sizes: list[int], rounds: int) -> list[dict[str, Any]]:
    enc = encoder(variant)
    lengths = [len(enc.tokenizer.encode(t).ids) for t in texts]
    order = sorted(range(len(texts)), key=lambda i: lengths[i])
    enc.padded(texts[:4])  # warm both paths
    single = enc.each(texts)
    best: dict[int, float] = {}
    worst: dict[int, float] = {}
    for _ in range(rounds):
        for size in sizes:
            vectors, cpu = run(enc, texts, order, size)
            best[size] = min(best.get(size, cpu), cpu)
            worst[size] = float(1.0 - (vectors * single).sum(axis=1).min())
    model = DYNINT8_ID if variant == "dynint8" else INT8_ID
    return [
        {
            "model": model,
            "batch": size,
            "cpu_ms_per_chunk": 1e3 * best[size] / len(texts),
            "vs_single": best[1] / best[size] if 1 in best else float("nan"),
            "worst_1_minus_cos": worst[size],
        }
        for size in sizes
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paragraphs", type=int, default=16, help="WikiQA pages to chunk")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variants", nargs="+", default=["dynint8", "int8"])
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "embed_chunks.json")
    args = parser.parse_args()
    if 1 not in args.sizes:
        args.sizes = [1, *args.sizes]
    print(load_note())
    texts = parse_and_chunk(paragraph_files(args.paragraphs), DYNINT8_ID)
    tokens = load_tokenizer()
    mean = float(np.mean([len(tokens.encode(t).ids) for t in texts]))
    print(f"{len(texts)} chunks of {args.paragraphs} WikiQA pages, {mean:.0f} tokens on average")
    rows: list[dict[str, Any]] = []
    for variant in args.variants:
        rows += measure(variant, texts, args.sizes, args.rounds)
    banner("embedder alone: one text per run vs length-sorted padded batches (1 ONNX thread)")
    keys = ("model", "batch", "cpu_ms_per_chunk", "vs_single")
    print(
        table(
            ["model", "texts/run", "CPU ms/chunk", "x single", "worst 1-cos"],
            [[*(r[k] for k in keys), f"{r['worst_1_minus_cos']:.1e}"] for r in rows],
            digits=3,
        )
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"chunks": len(texts), "rows": rows}, indent=2))
    print(f"\nwritten: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
