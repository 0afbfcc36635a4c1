"""Run the verifier pipeline in order: prep -> embed -> train -> export -> calibrate ->
evaluate -> sums (``make verifier``).

    make verifier                      # = .venv-train/bin/python -m training.verifier.build all
    .venv-train/bin/python -m training.verifier.build export calibrate evaluate sums

The embed step runs under the project's venv (``--embed-python``, the gateway's ONNX
embedder); when that is unavailable it keeps the cached vectors in ``.cache/emb``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from pathlib import Path

from training.verifier.common import ARTIFACTS, CACHE, REPO, RUNS

STEPS = ("prep", "embed", "train", "export", "calibrate", "evaluate", "sums")


def sh(cmd: list[str], env: dict[str, str] | None = None) -> None:
    print(f"[build] $ {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, check=True, cwd=REPO, env=env)


def write_sums(folder: Path) -> None:
    lines = []
    for f in sorted(folder.iterdir()):
        if f.is_file() and f.name != "SHA256SUMS":
            lines.append(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.name}\n")
    (folder / "SHA256SUMS").write_text("".join(lines))
    print(f"[build] wrote {folder / 'SHA256SUMS'} ({len(lines)} files)", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("steps", nargs="+", choices=(*STEPS, "all"))
    ap.add_argument(
        "--embed-python",
        default=os.environ.get("DEJA_EMBED_PYTHON", str(REPO / ".venv" / "bin" / "python")),
    )
    ap.add_argument("--smoke", action="store_true", help="train on 300 pairs into runs/smoke")
    ap.add_argument(
        "--ckpt",
        type=Path,
        default=None,
        help="checkpoint to export (default: the train step's final.pt)",
    )
    ap.add_argument("--time-budget-min", type=float, default=70.0)
    ap.add_argument("--device", default="cpu", help="the train step's torch device (cuda: a GPU)")
    args = ap.parse_args(argv)
    steps = STEPS if "all" in args.steps else tuple(s for s in STEPS if s in args.steps)
    py = sys.executable
    run_dir = RUNS / ("smoke" if args.smoke else "full")
    for step in steps:
        if step == "prep":
            sh([py, "-m", "training.verifier.prep"])
        elif step == "embed":
            env = dict(os.environ, PYTHONPATH=str(REPO))
            try:
                sh([args.embed_python, "-m", "training.verifier.embed"], env=env)
            except (subprocess.CalledProcessError, FileNotFoundError) as exc:
                if not (CACHE / "emb" / "val.npy").exists():
                    raise
                print(f"[build] embed step failed ({exc}); using the cached vectors", flush=True)
        elif step == "train":
            # as shipped: the synonym mix, the word embeddings frozen, three epochs in one
            # schedule (lr 4e-5, batch 32), seed 4321; 4.7 min on an H200 beside seven other
            # runs (training.verifier.sweep), about 54 min on 2 idle cores (84 pairs/s)
            cmd = [py, "-m", "training.verifier.train", "--out", str(run_dir)]
            cmd += ["--train", str(CACHE / "train_synonyms.jsonl"), "--freeze-layers", "0"]
            cmd += ["--epochs", "3", "--seed", "4321", "--threads", "2", "--device", args.device]
            if args.smoke:
                cmd += ["--limit", "300"]
            if args.time_budget_min:
                cmd += ["--time-budget-min", str(args.time_budget_min)]
            sh(cmd)
        elif step == "export":
            sh(
                [
                    py,
                    "-m",
                    "training.verifier.export",
                    "--ckpt",
                    str(args.ckpt or run_dir / "final.pt"),
                ]
            )
        elif step == "calibrate":
            sh([py, "-m", "training.verifier.calibrate"])
        elif step == "evaluate":
            sh([py, "-m", "training.verifier.evaluate"])
            sh([py, "-m", "training.verifier.plots"])
        elif step == "sums":
            write_sums(ARTIFACTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
