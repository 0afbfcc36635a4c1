"""Precision against hit rate (cache mode) or recall (pairwise) for cosine, the previous
verifier and the new one, one panel per evaluation set, from ``eval_report.json``
(``training.verifier.evaluate``). Needs matplotlib (the ``train`` extra).

    .venv-train/bin/python -m training.verifier.plots --out docs/img/verifier-curves.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from training.verifier.common import RUNS

PANELS = (
    ("dev", "qqp_dev (cache mode)", "duplicate hit rate"),
    ("val", "Quora validation split (cache mode)", "duplicate hit rate"),
    ("mrpc", "MRPC held-out (pairwise)", "recall"),
    ("gen", "generalisation set (pairwise)", "recall (paraphrases served)"),
)


def points(part: dict[str, Any], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for p in part:
        prec = p.get("precision")
        if prec is None or prec != prec or not p.get("labelled", p.get("served", 0)):
            continue
        xs.append(float(p[key]))
        ys.append(float(prec))
    return xs, ys


def draw(report: dict[str, Any], out: Path) -> None:
    fig, axes = plt.subplots(2, 2, figsize=(11, 8.5))
    for ax, (name, title, xlabel) in zip(axes.flat, PANELS, strict=True):
        key = "hit_rate" if name in ("dev", "val") else "recall"
        for system, colour in (("new", "tab:green"), ("old", "tab:red")):
            part = report.get(system, {}).get(name)
            if not part:
                continue
            xs, ys = points(part["curve"], key)
            label = "new verifier + decision" if system == "new" else "previous verifier"
            ax.plot(xs, ys, "-o", ms=3, color=colour, label=label)
            if system == "new" and part.get("per_target"):
                for p in part["per_target"]:
                    if p.get("labelled"):
                        lo, hi = p["interval"]
                        ax.errorbar(
                            p["hit_rate"],
                            p["precision"],
                            yerr=[[p["precision"] - lo], [hi - p["precision"]]],
                            fmt="s",
                            color="black",
                            ms=4,
                            capsize=3,
                        )
                        ax.annotate(
                            f"{p['target']:.2f}",
                            (p["hit_rate"], p["precision"]),
                            textcoords="offset points",
                            xytext=(4, -10),
                            fontsize=7,
                        )
        new = report.get("new", {}).get(name) or report.get("old", {}).get(name)
        if new:  # the cosine curve is the same for both systems
            cos = new["cosine"] if name in ("dev", "val") else new["cosine_curve"]
            xs, ys = points(cos, key)
            ax.plot(xs, ys, "--", color="tab:blue", label="cosine alone")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("precision" + (" (labelled)" if name in ("dev", "val") else ""))
        ax.set_xlim(0, 1)
        ax.set_ylim(0.4, 1.01)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    fig.suptitle(
        "deja verifier: precision against hit rate (black squares: the new table's "
        "targets, 95% Wilson intervals)",
        fontsize=10,
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    print(f"[plots] wrote {out}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--report", type=Path, default=RUNS / "eval_report.json")
    ap.add_argument("--out", type=Path, default=Path("docs/img/verifier-curves.png"))
    args = ap.parse_args(argv)
    draw(json.loads(args.report.read_text()), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
