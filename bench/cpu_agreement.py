"""Do two kinds of x86 CPU give the same scores? The shipped verifier's logits, the embedder's
pair cosines and the semantic decision on Quora dev pairs, written to a JSON file; run it on
each CPU and ``--compare`` the files.

Dynamic int8 models run on integer kernels that differ by CPU: VNNI (``vpdpbusd``) sums
uint8 x int8 products exactly, AVX2 (``vpmaddubsw``) saturates a pair sum at int16, which
8-bit weights can reach. The shipped verifier and the derived embedder use 7-bit weights so
that no sum can saturate; this script measures what is left (the fp32 parts' kernels differ
too). With no AVX2-only machine at hand, run the second half under QEMU's user-mode emulation
of a Haswell CPU (AVX2, no VNNI); it is about 130 times slower, so keep ``--pairs`` small::

    .venv/bin/python bench/cpu_agreement.py --out bench/results/cpu_native.json
    apt-get install -y qemu-user
    qemu-x86_64 -cpu Haswell .venv/bin/python bench/cpu_agreement.py \\
        --out bench/results/cpu_haswell.json
    .venv/bin/python bench/cpu_agreement.py --compare bench/results/cpu_native.json \\
        bench/results/cpu_haswell.json

Both runs must load the same derived embedder file (``--cache``; the first run derives it):
each run records its sha256 and ``--compare`` says whether they match. The pairs are the first
``--pairs`` rows of ``../shared/data/qqp_dev.jsonl``. Which CPU a file stands for is up to its
name: under QEMU's user mode ``/proc/cpuinfo`` still shows the host.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEV = REPO.parent / "shared" / "data" / "qqp_dev.jsonl"
CACHE = REPO / "bench" / "results" / ".cache" / "models"
VERIFIER = REPO / "deja" / "models" / "verifier"
TARGET = 0.92


def measure(pairs: int, cache: Path, verifier: Path) -> dict[str, Any]:
    from deja.embedding.onnx.derive import derived_model_path
    from deja.embedding.onnx.embedder import load_onnx_embedder
    from deja.embedding.onnx.encoder import source_model_path
    from deja.files import file_sha256
    from deja.semantic.crossencoder import CrossEncoder
    from deja.semantic.cutoffs import load_table
    from deja.semantic.mismatch import compare

    rows = [json.loads(line) for line in DEV.read_text().splitlines()[:pairs]]
    table = load_table(verifier / "calibration.json")
    started = time.perf_counter()
    embedder = load_onnx_embedder(cache)
    encoder = CrossEncoder.load(verifier, max_tokens=table.max_tokens)
    derived = derived_model_path(cache, source_model_path())
    cosines, logits, scores = [], [], []
    for i, row in enumerate(rows):
        a, b = embedder.embed_batch([row["a"], row["b"]])
        cosine = float(np.dot(a, b))
        logit = float(encoder.logits(row["b"], [row["a"]])[0])
        cosines.append(cosine)
        logits.append(logit)
        scores.append(table.score(logit, cosine, compare(row["b"], row["a"])))
        if (i + 1) % 10 == 0:
            print(f"[cpu_agreement] {i + 1}/{len(rows)} pairs", file=sys.stderr, flush=True)
    return {
        "embedder": embedder.vectors_id,
        "embedder_file_sha256": file_sha256(derived),
        "verifier_sha256": table.model_sha256,
        "tau": table.tau(TARGET),
        "pairs": len(rows),
        "seconds": round(time.perf_counter() - started, 1),
        "cosine": cosines,
        "logit": logits,
        "score": scores,
    }


def compare_runs(first: Path, second: Path) -> dict[str, Any]:
    a, b = json.loads(first.read_text()), json.loads(second.read_text())
    if a["pairs"] != b["pairs"] or a["verifier_sha256"] != b["verifier_sha256"]:
        raise SystemExit("the two runs scored different pairs or different verifiers")
    out: dict[str, Any] = {
        "pairs": a["pairs"],
        "same_embedder_file": a["embedder_file_sha256"] == b["embedder_file_sha256"],
    }
    for name in ("logit", "cosine", "score"):
        delta = np.abs(np.asarray(a[name]) - np.asarray(b[name]))
        out[f"{name}_abs_diff_mean"] = round(float(delta.mean()), 5)
        out[f"{name}_abs_diff_max"] = round(float(delta.max()), 5)
    tau = a["tau"]
    served = [(x >= tau, y >= tau) for x, y in zip(a["score"], b["score"], strict=True)]
    out[f"decisions_differing_at_{TARGET}"] = sum(x != y for x, y in served)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--pairs", type=int, default=50, help="Quora dev pairs to score")
    ap.add_argument("--cache", type=Path, default=CACHE, help="the derived embedder's folder")
    ap.add_argument(
        "--verifier",
        type=Path,
        default=VERIFIER,
        help="a verifier folder (model, tokenizer.json, calibration.json); default: shipped",
    )
    ap.add_argument("--out", type=Path, help="where this CPU's scores go (JSON)")
    ap.add_argument("--compare", type=Path, nargs=2, metavar=("A", "B"), help="two runs' files")
    args = ap.parse_args(argv)
    if args.compare:
        print(json.dumps(compare_runs(*args.compare), indent=2))
        return 0
    if args.out is None:
        ap.error("--out is required unless --compare is given")
    result = measure(args.pairs, args.cache, args.verifier)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result))
    print(f"[cpu_agreement] {result['pairs']} pairs in {result['seconds']} s -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
