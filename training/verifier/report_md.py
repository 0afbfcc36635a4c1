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
    print("## Candidates and decision compared on validation\n")
    print(
        table(
            [
                {
                    "k": o["k"],
                    "floor": o["floor"],
                    "decision": o["decision"],
                    "area": o["area"],
                    "calls": o["calls"],
                }
                for o in cal["options"]
            ],
            [
                ("k", "k"),
                ("floor", "cosine floor"),
                ("decision", "decision"),
                ("area", "sum of hit rates (0.85-0.95)"),
                ("calls", "verifier calls / lookup"),
            ],
        )
    )
    print("\n## Vetoes (flagged labelled candidates on both validation sets)\n")
    print(
        table(
            cal["veto_check"],
            [
                ("kind", "kind"),
                ("flagged", "flagged"),
                ("right", "right"),
                ("right_rate", "right rate"),
            ],
        )
    )
    print("\n## Calibration table (validation)\n")
    print(
        table(
            [{**r, "interval": str(r.get("interval"))} for r in cal["chosen"]["table"]],
            [
                ("precision", "target"),
                ("tau", "τ"),
                ("hit_rate", "val hit rate"),
                ("measured_precision", "val precision"),
                ("interval", "95% interval"),
                ("labelled", "labelled"),
            ],
        )
    )
    for system in ("new", "old"):
        for name in ("dev", "val"):
            part = ev.get(system, {}).get(name)
            if not part:
                continue
            print(f"\n## {system}: {name}, per target (cache mode)\n")
            print(
                table(
                    [{**p, "interval": str(p.get("interval"))} for p in part["per_target"]],
                    [
                        ("target", "target"),
                        ("tau", "τ"),
                        ("precision", "labelled precision"),
                        ("interval", "95% interval"),
                        ("hit_rate", "dup hit rate"),
                        ("labelled", "labelled"),
                        ("unjudged", "unjudged"),
                    ],
                )
            )
        for name in ("mrpc", "gen"):
            part = ev.get(system, {}).get(name)
            if not part:
                continue
            print(f"\n## {system}: {name} (pairwise) at the default target\n")
            print(f"default: {json.dumps(part['default'])}\n")
            print(
                table(
                    [{"kind": k, **v} for k, v in part["by_kind"].items()],
                    [("kind", "kind"), ("rows", "rows"), ("served", "served")],
                )
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
