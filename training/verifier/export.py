"""Export a verifier checkpoint to ONNX (fp32), quantise it with ONNX Runtime's dynamic int8
quantisation with 7-bit weights (``reduce_range``: see :func:`quantise`), check the int8 file
against fp32 (max |prob diff| and AUC on validation pairs) and measure int8 latency
(intra_op_num_threads=1).

ONNX contract: inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` (int64
[batch, seq], dynamic), output ``logits`` (float32 [batch, 1]); prob = sigmoid(logits).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from onnxruntime.quantization import QuantType, quantize_dynamic

from deja.semantic.auc import auc
from training.verifier.calibration import Verifier, sigmoid
from training.verifier.common import ARTIFACTS, CACHE, RUNS, SEED, read_pairs
from training.verifier.model import base_model_dir, load_checkpoint
from training.verifier.train import collate, encode, make_tokenizer


def export_fp32(ckpt: Path, out: Path) -> None:
    model = load_checkpoint(ckpt, attn="eager")
    tok = make_tokenizer()
    ids, am, tt = collate(
        encode(
            tok,
            [
                ("How do I learn Python?", "Best way to learn Python?"),
                ("What is AI?", "What is artificial intelligence?"),
            ],
        )
    )
    dyn = {
        "input_ids": {0: "batch", 1: "seq"},
        "attention_mask": {0: "batch", 1: "seq"},
        "token_type_ids": {0: "batch", 1: "seq"},
        "logits": {0: "batch"},
    }
    with torch.no_grad():
        ref = model(ids, am, tt).numpy()
        torch.onnx.export(
            model,
            (ids, am, tt),
            str(out),
            dynamo=False,
            opset_version=17,
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["logits"],
            dynamic_axes=dyn,
            do_constant_folding=True,
        )
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    got = sess.run(
        None, {"input_ids": ids.numpy(), "attention_mask": am.numpy(), "token_type_ids": tt.numpy()}
    )[0]
    print(
        f"[export] fp32 ONNX {out} ({out.stat().st_size / 1e6:.1f} MB), "
        f"max |logit diff| vs torch {np.abs(ref - got).max():.2e}",
        flush=True,
    )


def quantise(fp32: Path, out: Path, *, per_channel: bool) -> None:
    """Dynamic int8 with 7-bit weights. With full 8-bit weights a CPU without VNNI (AVX2's
    ``vpmaddubsw``) saturates some uint8 x int8 sums that VNNI computes exactly, so one pair
    scored differently on the two kinds of CPU (up to 0.97 in logit on validation pairs, run
    under ``qemu-x86_64 -cpu Haswell``). With 7-bit weights no sum can saturate: both kernels
    give the same integers, and a table fitted on one CPU holds on the other."""
    quantize_dynamic(
        str(fp32),
        str(out),
        weight_type=QuantType.QInt8,
        per_channel=per_channel,
        reduce_range=True,
    )


def latency(model: Path, tokenizer: Path, reps: int = 300) -> dict[str, float]:
    v = Verifier.load(model, tokenizer, threads=1)
    a = "What is the best way to learn machine learning as a beginner?"
    b = "How should a beginner start learning machine learning and AI?"
    one = v.features([(a, b)])
    four = v.features(
        [
            (a, b),
            (a, "What are the best books on machine learning?"),
            (a, "Is it hard to learn machine learning without a degree?"),
            (a, "How do I learn deep learning quickly?"),
        ]
    )
    res: dict[str, float] = {
        "tokens_single": float(one["input_ids"].shape[1]),
        "tokens_batch4_padded": float(four["input_ids"].shape[1]),
    }
    for name, feats in (("single", one), ("batch4", four)):
        for _ in range(20):
            v.session.run(None, feats)
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            v.session.run(None, feats)
            ts.append((time.perf_counter() - t) * 1e3)
        res[f"{name}_p50_ms"] = float(np.percentile(ts, 50))
        res[f"{name}_p99_ms"] = float(np.percentile(ts, 99))
    # end-to-end incl. tokenisation, one pair
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        v.logits([(a, b)])
        ts.append((time.perf_counter() - t) * 1e3)
    res["single_with_tokenize_p50_ms"] = float(np.percentile(ts, 50))
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--ckpt", type=Path, default=RUNS / "full" / "final.pt")
    ap.add_argument("--workdir", type=Path, default=RUNS / "export")
    ap.add_argument("--artifacts", type=Path, default=ARTIFACTS)
    ap.add_argument("--check-pairs", type=int, default=500)
    ap.add_argument("--val", type=Path, default=CACHE / "val.jsonl")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument(
        "--per-tensor", action="store_true", help="also try per-tensor int8 (per-channel shipped)"
    )
    ap.add_argument("--latency-reps", type=int, default=300)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    args.workdir.mkdir(parents=True, exist_ok=True)
    args.artifacts.mkdir(parents=True, exist_ok=True)
    fp32 = args.workdir / "verifier-fp32.onnx"
    export_fp32(args.ckpt, fp32)
    tok_src = base_model_dir() / "tokenizer.json"
    variants: dict[str, Path] = {}
    for per_channel in (True, False) if args.per_tensor else (True,):
        q = args.workdir / f"verifier-int8-{'pc' if per_channel else 'pt'}.onnx"
        quantise(fp32, q, per_channel=per_channel)
        variants["per_channel" if per_channel else "per_tensor"] = q

    rows = read_pairs(args.val)
    rng = np.random.default_rng(args.seed)
    pick = rng.choice(len(rows), size=min(args.check_pairs, len(rows)), replace=False)
    pairs = [(rows[i].a, rows[i].b) for i in pick]
    y = np.array([rows[i].duplicate for i in pick])
    v32 = Verifier.load(fp32, tok_src, threads=1)
    p32 = sigmoid(v32.logits(pairs, batch=1))
    report: dict[str, object] = {
        "check_pairs": len(pairs),
        "fp32_auc": auc(p32, y),
        "fp32_mb": fp32.stat().st_size / 1e6,
    }
    best, best_key = None, (-1.0, 0.0)
    for name, q in variants.items():
        vq = Verifier.load(q, tok_src, threads=1)
        pq = sigmoid(vq.logits(pairs, batch=1))
        pq4 = sigmoid(vq.logits(pairs, batch=4))
        d = float(np.abs(pq - p32).max())
        r = {
            "auc": auc(pq, y),
            "max_abs_prob_diff_vs_fp32": d,
            "mean_abs_prob_diff_vs_fp32": float(np.abs(pq - p32).mean()),
            "max_abs_prob_diff_batch4_vs_single": float(np.abs(pq4 - pq).max()),
            "mb": q.stat().st_size / 1e6,
        }
        report[name] = r
        print(f"[export] int8 {name}: {r}", flush=True)
        key = (round(float(r["auc"]), 3), -d)
        if key > best_key:
            best, best_key = name, key
    assert best is not None
    report["chosen"] = best
    print(f"[export] fp32 AUC {report['fp32_auc']:.4f}; keeping int8 {best}", flush=True)
    dst = args.artifacts / "verifier-int8.onnx"
    shutil.copyfile(variants[best], dst)
    shutil.copyfile(tok_src, args.artifacts / "tokenizer.json")
    lat = latency(dst, args.artifacts / "tokenizer.json", args.latency_reps)
    report["latency_int8_1thread"] = lat
    print(f"[export] latency {lat}", flush=True)
    (args.workdir / "export_report.json").write_text(json.dumps(report, indent=2))
    print(f"[export] wrote {dst} and {args.workdir / 'export_report.json'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
