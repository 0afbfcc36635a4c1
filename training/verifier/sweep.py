"""Train several verifier set-ups side by side on one GPU, score them on the validation files,
and keep the best set-up's models in a form small enough to bring back.

Made for a short loan of a GPU machine that reaches no network and gives back at most 64 MB:

- ``pack`` (here): the base model as fp16 safetensors, and the training file and the validation
  files gzipped, into one folder to carry (about 53 MB).
- ``run`` (there): every set-up of ``SETUPS`` with every seed of ``SEEDS`` trains at once, one
  ``training.verifier.train --device cuda --freeze-layers 0`` process each, all under one time
  budget. Each final model is scored on the validation files, and the set-up with the best mean
  pairwise AUC on the Quora validation rows is kept (or the one ``--keep`` names: at most one
  set-up's models fit in what comes back). The word embeddings are frozen, so a
  trained model is its encoder, pooler and head: written as fp16, two files per model, each
  under 16 MB.
- ``unpack`` (here): a kept model's files and the packed base give a ``final.pt`` for
  ``training.verifier.export``.

Nothing here decides what ships: a kept model goes through ``export``, ``calibrate`` and the
model card's rule like any other candidate.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer

from deja.semantic.auc import auc
from training.verifier.common import CACHE, RUNS, read_json_rows, write_json_rows
from training.verifier.model import CrossEncoder, base_model_dir, build, model_from_state
from training.verifier.train import collate, encode, make_tokenizer

#: name -> (training mix, epochs). "synonym" is ``train_synonyms.jsonl`` as prep writes it
#: (the shipped model's mix: synonym3); "base" leaves the synonym rows out (the mix before).
SETUPS = {
    "base3": ("base", 3),
    "synonym3": ("synonym", 3),
    "base6": ("base", 6),
    "synonym6": ("synonym", 6),
}
SEEDS = (1234, 4321)
#: Validation files scored for every model (``b`` asks, ``a`` is cached).
VAL_FILES = ("val.jsonl", "val_synonym.jsonl", "val_extra.jsonl")
FROZEN = "bert.embeddings."
PART_BYTES = 15_000_000


def pack(train: Path, val_dir: Path, out: Path) -> None:
    """The base model at fp16 and the data, gzipped, into ``out``."""
    (out / "base").mkdir(parents=True, exist_ok=True)
    src = base_model_dir()
    state = load_file(str(src / "model.safetensors"))
    save_file(
        {k: v.half().contiguous() for k, v in state.items()},
        str(out / "base" / "model.safetensors"),
    )
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(src / name, out / "base" / name)
    (out / "data").mkdir(exist_ok=True)
    for path in (train, *(val_dir / f for f in VAL_FILES)):
        with path.open("rb") as fh, gzip.open(out / "data" / (path.name + ".gz"), "wb") as gz:
            shutil.copyfileobj(fh, gz)
    print(
        f"[pack] {out}: {sum(p.stat().st_size for p in out.rglob('*') if p.is_file()) / 1e6:.1f} MB"
    )


def unpacked_base(packed: Path, out: Path) -> Path:
    """The packed fp16 base back at fp32 (what training and ``unpack`` both start from)."""
    out.mkdir(parents=True, exist_ok=True)
    state = load_file(str(packed / "base" / "model.safetensors"))
    save_file({k: v.float() for k, v in state.items()}, str(out / "model.safetensors"))
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(packed / "base" / name, out / name)
    return out


def mixes(packed: Path, work: Path) -> dict[str, Path]:
    rows = read_json_rows(next((packed / "data").glob("train*.jsonl.gz")))
    base = [r for r in rows if not str(r.get("kind", "")).startswith("synonym")]
    files = {"base": work / "base.jsonl", "synonym": work / "synonym.jsonl"}
    write_json_rows(files["base"], base)
    write_json_rows(files["synonym"], rows)
    print(f"[sweep] mixes: base {len(base)} rows, synonym {len(rows)} rows", flush=True)
    return files


def train_all(
    files: dict[str, Path], work: Path, minutes: float, device: str, limit: int
) -> list[Path]:
    """Start one training process per (set-up, seed), wait for all, return their folders."""
    procs: list[tuple[Path, subprocess.Popen[bytes]]] = []
    logs = []
    for name, (mix, epochs) in SETUPS.items():
        for seed in SEEDS:
            run = work / "runs" / f"{name}-{seed}"
            run.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, "-m", "training.verifier.train", "--train", str(files[mix])]
            cmd += ["--out", str(run), "--epochs", str(epochs), "--seed", str(seed)]
            cmd += ["--freeze-layers", "0", "--device", device, "--threads", "1"]
            cmd += ["--time-budget-min", str(minutes), "--limit", str(limit)]
            logs.append((run / "train.log").open("wb"))
            procs.append((run, subprocess.Popen(cmd, stdout=logs[-1], stderr=subprocess.STDOUT)))
    while any(p.poll() is None for _, p in procs):
        time.sleep(20)
        for run, p in procs:
            lines = (run / "train.log").read_text(errors="replace").splitlines()
            print(
                f"  {run.name}: {'running' if p.poll() is None else p.returncode} "
                f"{lines[-1][:150] if lines else ''}",
                flush=True,
            )
    for log in logs:
        log.close()
    return [run for run, p in procs if p.returncode == 0 and (run / "final.pt").exists()]


@torch.no_grad()
def logits(
    model: CrossEncoder, tok: Tokenizer, rows: list[dict[str, object]], device: str
) -> np.ndarray:
    enc = encode(tok, [(str(r["b"]), str(r["a"])) for r in rows])
    order = np.argsort([len(x) for x, _ in enc], kind="stable")
    out = np.empty(len(rows), dtype=np.float32)
    for s in range(0, len(order), 512):
        idx = order[s : s + 512]
        ids, am, tt = (x.to(device) for x in collate([enc[i] for i in idx]))
        out[idx] = model(ids, am, tt)[:, 0].float().cpu().numpy()
    return out


def score_all(
    runs: list[Path], packed: Path, device: str, val_limit: int
) -> tuple[dict[str, np.ndarray], dict[str, dict[str, float]]]:
    sets = {f: read_json_rows(packed / "data" / (f + ".gz")) for f in VAL_FILES}
    if val_limit:  # a seeded sample, so both labels stay (smoke)
        rng = np.random.default_rng(0)
        sets = {
            f: [rows[i] for i in sorted(rng.permutation(len(rows))[:val_limit])]
            for f, rows in sets.items()
        }
    saved: dict[str, np.ndarray] = {
        f"label/{f}": np.array([bool(r["duplicate"]) for r in rows]) for f, rows in sets.items()
    }
    metrics: dict[str, dict[str, float]] = {}
    tok = make_tokenizer()
    for run in runs:
        saved_run = torch.load(run / "final.pt", map_location="cpu", weights_only=True)
        model = model_from_state(saved_run).to(device)
        meta = saved_run["meta"]
        m: dict[str, float] = {
            "partial": float(bool(meta.get("partial"))),
            "seconds": float(meta["seconds"]),
            "steps": float(meta["steps"]),
            "steps_done": float(saved_run["step"]),
        }
        for f, rows in sets.items():
            z = logits(model, tok, rows, device)
            saved[f"{run.name}/{f}"] = z
            y = saved[f"label/{f}"]
            if y.all():
                m[f"{f}:served_at_p0.5"] = float((z > 0).mean())
            else:
                m[f"{f}:auc"] = auc(z, y)
        metrics[run.name] = m
        print(f"[sweep] {run.name}: {json.dumps(m)}", flush=True)
    return saved, metrics


def choose(metrics: dict[str, dict[str, float]]) -> str:
    """The set-up whose seeds all finished with the best mean Quora validation AUC."""
    best, best_auc = "", -1.0
    for name in SETUPS:
        aucs = [metrics.get(f"{name}-{s}", {}).get("val.jsonl:auc") for s in SEEDS]
        if all(a is not None for a in aucs):
            mean = float(np.mean([a for a in aucs if a is not None]))
            if mean > best_auc:
                best, best_auc = name, mean
    if not best:
        raise SystemExit("no set-up finished with every seed")
    return best


def write_parts(ckpt: Path, out: Path) -> list[Path]:
    """The trained weights (all but the frozen embeddings) at fp16, in files under 16 MB."""
    state = torch.load(ckpt, map_location="cpu", weights_only=True)
    kept = {k: v.half() for k, v in state["model"].items() if not k.startswith(FROZEN)}
    parts: list[dict[str, torch.Tensor]] = [{}]
    for k, v in kept.items():
        if (
            parts[-1]
            and sum(t.numel() * 2 for t in parts[-1].values()) + v.numel() * 2 > PART_BYTES
        ):
            parts.append({})
        parts[-1][k] = v
    paths = []
    for i, part in enumerate(parts):
        path = out / f"{ckpt.parent.name}.{i}.pt"
        torch.save({"model": part, "meta": state["meta"], "step": state["step"]}, path)
        paths.append(path)
    return paths


def run(
    packed: Path,
    out: Path,
    work: Path,
    minutes: float,
    device: str,
    limit: int,
    val_limit: int,
    keep: str | None = None,
) -> None:
    os.environ["DEJA_VERIFIER_BASE_DIR"] = str(unpacked_base(packed, work / "base"))
    t0 = time.monotonic()
    runs = train_all(mixes(packed, work), work, minutes, device, limit)
    print(f"[sweep] {len(runs)} runs trained in {(time.monotonic() - t0) / 60:.1f} min", flush=True)
    saved, metrics = score_all(runs, packed, device, val_limit)
    best = keep or choose(metrics)
    out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out / "logits.npz", **saved)
    parts = [
        p.name for s in SEEDS for p in write_parts(work / "runs" / f"{best}-{s}" / "final.pt", out)
    ]
    summary = {
        "setups": {k: list(v) for k, v in SETUPS.items()},
        "seeds": list(SEEDS),
        "minutes": minutes,
        "metrics": metrics,
        "kept": best,
        "kept_by": "--keep" if keep else "best mean validation AUC",
        "parts": parts,
        "device": torch.cuda.get_device_name() if device == "cuda" else device,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"[sweep] kept {best}: {parts}", flush=True)


def unpack(parts: list[Path], packed: Path, out: Path) -> None:
    """``final.pt`` from a kept model's part files and the packed base's embeddings. Parts of
    several models (``NAME.0.pt``, ``NAME.1.pt`` per model) give their weights' mean: a soup
    of runs that started from the same base and differ in data order."""
    got = [torch.load(p, map_location="cpu", weights_only=True) for p in parts]
    models = sorted({p.name.split(".")[0] for p in parts})
    trained: dict[str, torch.Tensor] = {}
    for g in got:
        for k, v in g["model"].items():
            trained[k] = trained.get(k, 0) + v.float() / len(models)
    meta = dict(got[0]["meta"])
    os.environ["DEJA_VERIFIER_BASE_DIR"] = str(unpacked_base(packed, out / "base"))
    base = load_file(str(out / "base" / "model.safetensors"))
    model = build(pretrained=False, head=str(meta.get("head_input", "pooler")))
    state = {}
    for key in model.state_dict():
        state[key] = base[key.removeprefix("bert.")] if key.startswith(FROZEN) else trained.pop(key)
    if trained:
        raise SystemExit(f"unknown tensors in the parts: {sorted(trained)[:5]}")
    model.load_state_dict(state)
    meta["unpacked_from"] = models
    torch.save({"model": state, "step": got[0]["step"], "meta": meta}, out / "final.pt")
    print(f"[unpack] {out / 'final.pt'}: {len(state)} tensors from {', '.join(models)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="base model and data into one folder to carry")
    p.add_argument("--train", type=Path, default=CACHE / "train_synonyms.jsonl")
    p.add_argument("--val-dir", type=Path, default=CACHE)
    p.add_argument("--out", type=Path, required=True)
    r = sub.add_parser(
        "run", help="train every set-up at once, score, keep the best (on the GPU machine)"
    )
    r.add_argument("--packed", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--work", type=Path, default=RUNS / "sweep")
    r.add_argument("--minutes", type=float, default=4.5, help="each run's time budget")
    r.add_argument("--device", default="cuda")
    r.add_argument(
        "--limit", type=int, default=0, help="use only the first N training pairs (smoke)"
    )
    r.add_argument("--val-limit", type=int, default=0, help="score N rows of each file (smoke)")
    r.add_argument(
        "--keep", choices=tuple(SETUPS), default=None, help="bring back this set-up's models"
    )
    u = sub.add_parser(
        "unpack", help="a kept model's part files (several models': their mean) into a final.pt"
    )
    u.add_argument("parts", type=Path, nargs="+")
    u.add_argument("--packed", type=Path, required=True)
    u.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.cmd == "pack":
        pack(args.train, args.val_dir, args.out)
    elif args.cmd == "run":
        run(
            args.packed,
            args.out,
            args.work,
            args.minutes,
            args.device,
            args.limit,
            args.val_limit,
            args.keep,
        )
    else:
        unpack(args.parts, args.packed, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
