"""``deja corpus ingest`` of one-paragraph pages through a running gateway: files sent in groups
(``POST``, 32 a request: what the CLI does) against one ``PUT`` per file (what it did before),
side by side.

The pages are the first ``--pages`` WikiQA pages (``../shared/data``, about two 200-token chunks
each: issue 21's folder of one-paragraph pages). One ``deja serve`` (real ONNX embedder, Qdrant
Edge) and a ``deja sim`` replica (SIMULATED, idle here); each round ingests the folder into a
fresh corpus with the CLI, alternating the two ways (A B B A ...). Reported per way: the best
round's chunks/s (wall, CLI start-up included) and the gateway's CPU milliseconds per chunk
(``/proc``; steadier than the wall clock on a shared machine).

    .venv/bin/python bench/ingest_cli.py [--pages 150] [--rounds 2] [--embed-threads 2]

About two minutes on the 2-core machine. Writes bench/results/ingest_cli.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import (
    RESULTS_DIR,
    VENV_BIN,
    banner,
    cpu_seconds,
    run_in_workdir,
    start_gateway,
    start_sim,
    stop_all,
    table,
)
from corpus import paragraph_files

ADMIN_KEY = "bench-admin-key"
#: The CLI in this interpreter, with its group size set: 1 is one PUT per file.
CLI = "import sys, app.cli.corpus as c; c.BATCH_FILES = int(sys.argv.pop(1)); " + (
    "from app.cli.main import main; main()"
)
WAYS = {"grouped (POST, 32 files)": 32, "one PUT per file": 1}


def ingest(folder: Path, url: str, corpus: str, group: int, gateway_pid: int) -> dict[str, float]:
    env = {**os.environ, "DEJA_ADMIN_KEY": ADMIN_KEY}
    cmd = [str(VENV_BIN / "python"), "-c", CLI, str(group), "corpus", "ingest", str(folder)]
    cmd += ["--corpus", corpus, "--root", str(folder), "--url", url, "--json"]
    cpu, started = cpu_seconds(gateway_pid), time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall, cpu = time.perf_counter() - started, cpu_seconds(gateway_pid) - cpu
    if done.returncode != 0:
        raise SystemExit(f"ingest failed ({done.returncode}): {done.stderr[-2000:]}")
    files = json.loads(done.stdout)["files"]
    chunks = sum(int(f.get("chunks") or 0) for f in files)
    assert all(f["status"] == "added" for f in files), files[:3]
    return {"chunks": chunks, "seconds": wall, "chunks_per_s": chunks / wall, "cpu_s": cpu}


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    folder = workdir / "pages"
    folder.mkdir()
    for page in paragraph_files(args.pages):
        (folder / page.document).write_bytes(page.data)
    env = {
        "DEJA_DATA_DIR": str(workdir / "data"),
        "DEJA_ADMIN_KEY": ADMIN_KEY,
        "DEJA_CORPUS_EMBED_THREADS": str(args.embed_threads),
    }
    runs: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    try:
        sim = start_sim("sim", cpu=None)
        gateway = start_gateway("gateway", [sim.url], cpu=None, env=env)
        for round_ in range(args.rounds):
            ways = list(WAYS) if round_ % 2 == 0 else list(reversed(WAYS))
            for way in ways:
                corpus = f"r{round_}-{WAYS[way]}"
                fig = ingest(folder, gateway.url, corpus, WAYS[way], gateway.popen.pid)
                print(f"  round {round_} {way}: {json.dumps(fig)}", flush=True)
                runs[way].append(fig)
    finally:
        stop_all()
    return {"pages": args.pages, "runs": runs}


def report(record: dict[str, Any]) -> None:
    banner(f"deja corpus ingest of {record['pages']} one-paragraph WikiQA pages")
    rows = []
    for way, figs in record["runs"].items():
        best = max(figs, key=lambda f: f["chunks_per_s"])
        rounds = ", ".join(f"{f['chunks_per_s']:.1f}" for f in figs)
        rows.append(
            [
                way,
                best["chunks"],
                best["chunks_per_s"],
                1e3 * best["cpu_s"] / best["chunks"],
                rounds,
            ]
        )
    print(table(["way", "chunks", "chunks/s", "gateway CPU ms/chunk", "rounds"], rows, digits=2))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--embed-threads", type=int, default=2)
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "ingest_cli.json")
    args = parser.parse_args()
    return run_in_workdir(args, "deja-ingest-cli-", run, report)


if __name__ == "__main__":
    sys.exit(main())
