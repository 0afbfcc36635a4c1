"""Render the pipeline's JSON reports (runs/*.json) as markdown tables for the model card."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from training.verifier.common import RUNS


def _f(x: Any, nd: int = 4) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return "nan" if x != x else f"{x:.{nd}f}"
    return str(x)


def table(rows: list[dict[str, Any]], cols: list[tuple[str, str]]) -> str:
    head = "| " + " | ".join(h for _, h in cols) + " |"
    sep = "|" + "|".join("---:" for _ in cols) + "|"
    body = ["| " + " | ".join(_f(r.get(k)) for k, _ in cols) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=Path, default=RUNS)
    args = ap.parse_args(argv)
    cal = json.loads((args.runs / "calibration_report.json").read_text())
    ev = json.loads((args.runs / "eval_report.json").read_text())
    ex = json.loads((args.runs / "export" / "export_report.json").read_text())
    curve_cols = [
        ("tau", "τ"),
        ("precision", "labelled precision"),
        ("hit_rate", "dup hit rate"),
        ("labelled", "labelled hits"),
        ("unjudged", "unjudged hits"),
    ]
    cos_cols = [("tau", "θ (cosine)"), *curve_cols[1:]]
    print("## Options compared on validation (sum of hit rates at 0.85-0.95 targets)\n")
    print(
        table(
            [
                {"floor": o["floor"], "decision": o["decision"], "area": o["area"]}
                for o in cal["options"]
            ],
            [("floor", "cosine floor"), ("decision", "decision"), ("area", "score")],
        )
    )
    print("\n## Calibration table (validation)\n")
    print(
        table(
            cal["chosen"]["table"],
            [
                ("precision", "target"),
                ("tau", "τ"),
                ("hit_rate", "val hit rate"),
                ("measured_precision", "val precision"),
            ],
        )
    )
    print("\n## Skip-verification check (validation, top-1 cosine hits)\n")
    print(
        table(
            cal["skip_check"],
            [
                ("cosine", "cosine ≥"),
                ("labelled", "labelled"),
                ("right", "right"),
                ("unjudged", "unjudged"),
                ("precision", "precision"),
            ],
        )
    )
    for name, rep in (("validation", cal), ("dev", ev)):
        print(f"\n## Chosen decision score (with skip), {name}\n")
        print(table(rep["verifier_curve"], curve_cols))
        if "verifier_only_curve" in rep:
            print(f"\n## Verifier probability alone (no skip), {name}\n")
            print(table(rep["verifier_only_curve"], curve_cols))
        print(f"\n## Cosine-only curve, {name}\n")
        print(table(rep["cosine_curve"], cos_cols))
        print(f"\nPairwise ({name}): {json.dumps(rep['pairwise'])}")
    print("\n## Dev: target -> measured\n")
    print(
        table(
            ev["per_target"],
            [
                ("target", "target"),
                ("tau", "τ"),
                ("precision", "dev labelled precision"),
                ("hit_rate", "dev dup hit rate"),
                ("labelled", "labelled"),
                ("unjudged", "unjudged"),
                ("val_hit_rate", "val hit rate"),
            ],
        )
    )
    print("\n## Export\n")
    print("```json\n" + json.dumps(ex, indent=2) + "\n```")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
