"""Two code trees side by side in ONE run: ``bench/gateway_paths.py`` against each, interleaved.

    .venv/bin/python bench/trees.py --base /tmp/deja-base [--runs 2] [-- gateway_paths args]

The base tree is any checkout of the project (``git archive base-stop17 | tar -x -C DIR``); it
is put first on ``PYTHONPATH``, ahead of this checkout's editable install, so the gateway (and
the simulator) it starts run that tree's code, while this checkout's bench drives both. Runs
alternate A B B A … so drift on a shared machine falls on both trees alike; each figure is the
median over a tree's runs, and each run's figures are themselves ratios against a bare server or
the simulator measured in the same run. The replica is SIMULATED.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"

#: (label, path into gateway_paths.json, which way is better)
FIGURES: list[tuple[str, tuple[str, ...], str]] = [
    ("exact: gateway/bare req/s", ("exact", "ratio_rps_gateway_over_bare"), "higher"),
    ("exact: gateway CPU us/hit", ("exact", "gateway_cpu_us_per_request"), "lower"),
    ("miss c1: added p50 ms", ("miss", "added_p50_ms"), "lower"),
    ("miss c1: gateway CPU us/miss", ("miss", "gateway_cpu_us_per_miss_c1"), "lower"),
    (
        "miss cN: gateway/direct req/s",
        ("miss", "concurrent", "ratio_rps_gateway_over_direct"),
        "higher",
    ),
    ("stream: TTFB added p50 ms", ("stream", "ttfb_added_ms_p50"), "lower"),
    ("stream: per-chunk overhead us", ("stream", "per_chunk_overhead_us_p50"), "lower"),
    ("stream: gateway CPU us/chunk", ("stream", "gateway_cpu_us_per_chunk"), "lower"),
]


def figure(results: dict[str, Any], path: tuple[str, ...]) -> float | None:
    found: Any = results
    for key in path:
        if not isinstance(found, dict) or key not in found:
            return None
        found = found[key]
    return float(found) if isinstance(found, int | float) else None


def run_once(tree: Path | None, label: str, index: int, extra: list[str]) -> dict[str, Any]:
    output = RESULTS_DIR / f"trees_{label}_{index}.json"
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, str(BENCH_DIR / "gateway_paths.py"), "--output", str(output), *extra]
    print(f"--- run {index} of tree {label} ({tree or REPO_ROOT})", flush=True)
    done = subprocess.run(cmd, env=env, cwd=REPO_ROOT, check=False, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"gateway_paths.py failed for tree {label} (exit {done.returncode})")
    results: dict[str, Any] = json.loads(output.read_text())
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--base", type=Path, required=True, help="the other code tree (before)")
    parser.add_argument("--runs", type=int, default=2, help="runs per tree (default 2)")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="-- then gateway_paths.py args")
    args = parser.parse_args()
    extra = [a for a in args.rest if a != "--"]
    trees: dict[str, Path | None] = {"before": args.base.resolve(), "after": None}
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    order = ["before", "after"]
    for index in range(args.runs):
        for label in order if index % 2 == 0 else order[::-1]:
            runs[label].append(run_once(trees[label], label, index, extra))
    print("\nbefore (base tree) vs after (this tree), median over runs, replica SIMULATED")
    print(f"{'figure':36} {'before':>10} {'after':>10} {'after/before':>13}  better")
    table: list[dict[str, Any]] = []
    for name, path, better in FIGURES:
        values = {
            label: [v for r in runs[label] if (v := figure(r, path)) is not None] for label in runs
        }
        before = statistics.median(values["before"]) if values["before"] else float("nan")
        after = statistics.median(values["after"]) if values["after"] else float("nan")
        change = after / before if before else float("nan")
        print(f"{name:36} {before:10.3f} {after:10.3f} {change:13.3f}  {better}")
        table.append(
            {
                "figure": name,
                "before": before,
                "after": after,
                "better": better,
                "runs_before": values["before"],
                "runs_after": values["after"],
            }
        )
    (RESULTS_DIR / "trees.json").write_text(json.dumps(table, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
