"""Retrieval through a running gateway: WikiQA pages ingested with ``deja corpus ingest``, the
held-out questions asked with the ``openai`` client, the sources read from the answers.

``bench/retrieval.py`` measures ``Corpora.retrieve`` in-process; this is the issue 21 target
as a user meets it: a real ``deja serve`` (and a ``deja sim`` replica, SIMULATED: its answers are
not looked at) over HTTP. The corpus is every WikiQA page (``../shared/data``), one document
each, plus the Python 3.11 docs Debian ships as distractors (``--sections``; ``apt-get install
python3.11-doc``), ingested once by the CLI (its rate is reported: the real ingest path, HTTP and
progress included). The questions are the held-out (``test``) half of ``bench/retrieval.py``'s
split: their pages were never used to choose the floor.

One gateway per configuration, on the same data folder, one after the other: each search mode
(dense, sparse, hybrid) with the floor off (``rag_min_score`` -1, margin 2: a plain top-k 4)
and with the settings' defaults (``rag_min_score`` 0.3, ``rag_score_margin`` 0.1). The response
cache is off, so every question retrieves. Per configuration: the share of questions whose page
is among the answer's sources (``X-Deja-Sources``, checked equal to the body's
``deja_sources``), the pages (documents) per prompt, answers with no source
(``X-Deja-Retrieval: empty``), and the request latency p50/p99 (embedding, retrieval and the
simulated replica's zero-delay answer).

    .venv/bin/python bench/retrieval_gateway.py [--sections tutorial] [--pages N]

About three minutes on the 2-core machine (the ingest is most of it). Writes
bench/results/retrieval_gateway.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from common import (
    RESULTS_DIR,
    banner,
    deja_bin,
    percentile,
    run_in_workdir,
    start_gateway,
    start_sim,
    stop_all,
    stop_process,
    table,
)
from corpus import DOCS
from openai import OpenAI
from retrieval import Question, load_wikiqa

ADMIN_KEY = "bench-admin-key"
CORPUS = "wiki"
FLOOR_OFF = {"DEJA_RAG_MIN_SCORE": "-1", "DEJA_RAG_SCORE_MARGIN": "2"}
FLOOR_ON = {"DEJA_RAG_MIN_SCORE": "0.3", "DEJA_RAG_SCORE_MARGIN": "0.1"}


def write_pages(folder: Path, pages: list[Any], sections: list[str]) -> int:
    """The WikiQA pages as ``<page>.txt`` and the docs sections as they are, under ``folder``."""
    for page in pages:
        (folder / page.document).write_bytes(page.data)
    for section in sections:
        shutil.copytree(DOCS / section, folder / "pydocs" / section)
    return len(pages)


def cli_ingest(folder: Path, url: str) -> dict[str, Any]:
    """``deja corpus ingest`` of ``folder`` against the gateway at ``url``: its report, timed."""
    env = {**os.environ, "DEJA_ADMIN_KEY": ADMIN_KEY}
    cmd = [deja_bin(), "corpus", "ingest", str(folder), "--corpus", CORPUS, "--root", str(folder)]
    started = time.perf_counter()
    done = subprocess.run(
        [*cmd, "--url", url, "--json", "--timeout", "3600"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"ingest failed ({done.returncode}): {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    files = report.get("files", [])
    chunks = sum(int(f.get("chunks") or 0) for f in files)
    return {
        "files": len(files),
        "chunks": chunks,
        "seconds": seconds,
        "chunks_per_s": chunks / seconds,
    }


def sources_of(raw: Any) -> list[str]:
    """The documents of an answer's sources, from the header, checked against the body's."""
    header = raw.headers.get("x-deja-sources") or ""
    from_header = [unquote(s.strip().rsplit("@", 1)[0]) for s in header.split(",") if s.strip()]
    extra = raw.parse().model_extra or {}
    from_body = [s["document"] for s in extra.get("deja_sources") or []]
    if sorted(from_header) != sorted(from_body):
        raise SystemExit(f"X-Deja-Sources {from_header} != deja_sources {from_body}")
    return from_header


def ask_all(url: str, questions: list[Question]) -> dict[str, Any]:
    client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=30)
    found = pages = empty = 0
    times: list[float] = []
    for q in questions:
        started = time.perf_counter()
        raw = client.chat.completions.with_raw_response.create(
            model="deja-sim-1",
            messages=[{"role": "user", "content": q.text}],
            extra_headers={"X-Deja-Corpus": CORPUS},
        )
        documents = sources_of(raw)
        times.append((time.perf_counter() - started) * 1e3)
        found += f"{q.page}.txt" in documents
        pages += len(set(documents))
        empty += raw.headers.get("x-deja-retrieval") == "empty"
    n = len(questions) or 1
    return {
        "questions": len(questions),
        "page_recall": found / n,
        "pages_per_prompt": pages / n,
        "empty": empty / n,
        "p50_ms": percentile(times, 50),
        "p99_ms": percentile(times, 99),
    }


def configurations() -> list[tuple[str, str, dict[str, str]]]:
    return [
        (mode, floor, {"DEJA_RAG_SEARCH": mode, **env})
        for mode in ("dense", "sparse", "hybrid")
        for floor, env in (("top-k 4", FLOOR_OFF), ("floor 0.3/0.1", FLOOR_ON))
    ]


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    pages, questions = load_wikiqa()
    if args.pages:  # a smoke run: the first pages and their questions only
        pages = pages[: args.pages]
        kept = {f.document[:-4] for f in pages}
        questions = [q for q in questions if q.page in kept]
    held_out = [q for q in questions if q.half == "test"]
    folder = workdir / "pages"
    folder.mkdir()
    write_pages(folder, pages, args.sections)
    base = {
        "DEJA_DATA_DIR": str(workdir / "data"),
        "DEJA_ADMIN_KEY": ADMIN_KEY,
        "DEJA_CACHE_ENABLED": "false",
        "DEJA_RAG_TOP_K": "4",
        "DEJA_CORPUS_EMBED_THREADS": str(args.embed_threads),
    }
    sim = start_sim("sim", cpu=None)
    record: dict[str, Any] = {"held_out_questions": len(held_out), "results": []}
    try:
        for i, (mode, floor, env) in enumerate(configurations()):
            gateway = start_gateway(f"gateway-{i}", [sim.url], cpu=None, env={**base, **env})
            try:
                if i == 0:
                    print(f"ingesting {folder} with deja corpus ingest ...", flush=True)
                    record["ingest"] = cli_ingest(folder, gateway.url)
                    print(json.dumps(record["ingest"]), flush=True)
                figures = ask_all(gateway.url, held_out)
            finally:
                stop_process(gateway)
            print(f"  {mode:6} {floor:14} {json.dumps(figures)}", flush=True)
            record["results"].append({"mode": mode, "floor": floor, **figures})
    finally:
        stop_all()
    return record


def report(record: dict[str, Any]) -> None:
    ingest = record["ingest"]
    banner("ingest through the gateway (deja corpus ingest)")
    print(
        f"{ingest['files']} files, {ingest['chunks']} chunks in {ingest['seconds']:.1f}s: "
        f"{ingest['chunks_per_s']:.1f} chunks/s"
    )
    banner(f"held-out WikiQA through the gateway ({record['held_out_questions']} questions)")
    rows = [
        [
            r["mode"],
            r["floor"],
            r["page_recall"],
            r["pages_per_prompt"],
            r["empty"],
            r["p50_ms"],
            r["p99_ms"],
        ]
        for r in record["results"]
    ]
    headers = ["mode", "floor", "page found", "pages/prompt", "no source", "p50 ms", "p99 ms"]
    print(table(headers, rows))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", nargs="*", default=["tutorial"])
    parser.add_argument("--pages", type=int, default=0, help="only this many pages (smoke)")
    parser.add_argument("--embed-threads", type=int, default=2)
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "retrieval_gateway.json")
    args = parser.parse_args()
    if args.sections and not DOCS.is_dir():
        print(f"{DOCS} is missing: apt-get install python3.11-doc", file=sys.stderr)
        return 2
    return run_in_workdir(args, "deja-retrieval-gateway-", run, report)


if __name__ == "__main__":
    sys.exit(main())
