"""The derived embedding model with and without the exporter's softmax NaN guards, side by side.

The ONNX export of MiniLM wraps each attention softmax in ``Where(IsNaN(p), 0, p)``, which only
acts on a fully masked row (a text has at least ``[CLS]``, so never). Derivation recipe ``pc2``
removes them (``deja.embedding.onnx.derive.drop_nan_guards``). This derives both graphs from
the installed model, checks they give the same vectors bit for bit on the chunks of the first
``--paragraphs`` WikiQA pages (chunked as ingest chunks them) and on short questions, and
times one run per text in interleaved rounds: process CPU ms per text (one ONNX thread).

    .venv/bin/python bench/embed_graph.py [--paragraphs 100] [--rounds 4]

Under a minute. Writes bench/results/embed_graph.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from common import RESULTS_DIR, banner, run_meta, table, write_record
from corpus import QUESTIONS, paragraph_files, parse_and_chunk

from deja.embedding.onnx import derive
from deja.embedding.onnx.encoder import (
    DYNINT8_ID,
    Encoder,
    load_tokenizer,
    make_session,
    source_model_path,
)


def derived(folder: Path, guards: bool) -> Encoder:
    path = folder / ("guarded.onnx" if guards else "pc2.onnx")
    tokenizer = load_tokenizer()
    drop = derive.drop_nan_guards
    if guards:
        derive.drop_nan_guards = lambda graph: 0
    try:
        derive.derive_dynint8(source_model_path(), path, tokenizer)
    finally:
        derive.drop_nan_guards = drop
    return Encoder(make_session(path), tokenizer)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paragraphs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "embed_graph.json")
    args = parser.parse_args()
    meta = run_meta(args, "none (in-process encoders)")
    print(meta["load_at_start"])
    chunks = parse_and_chunk(paragraph_files(args.paragraphs), DYNINT8_ID)
    with tempfile.TemporaryDirectory() as work:
        encoders = {"with guards (pc1)": derived(Path(work), True)}
        encoders["without (pc2)"] = derived(Path(work), False)
        record: dict[str, Any] = {"chunks": len(chunks), "rows": {}}
        for texts_name, texts in (("chunks", chunks), ("questions", QUESTIONS)):
            a, b = (enc.each(texts) for enc in encoders.values())
            same = bool(np.array_equal(a, b))
            cpu: dict[str, list[float]] = {name: [] for name in encoders}
            for r in range(args.rounds):
                order = list(encoders) if r % 2 == 0 else list(reversed(encoders))
                for name in order:
                    started = time.process_time()
                    encoders[name].each(texts)
                    cpu[name].append((time.process_time() - started) / len(texts) * 1e3)
            record["rows"][texts_name] = {"bit_equal": same, "cpu_ms": cpu}
    banner(f"one ONNX run per text, CPU ms per text (median of {args.rounds} rounds)")
    rows = []
    for texts_name, row in record["rows"].items():
        base, new = (float(np.median(v)) for v in row["cpu_ms"].values())
        rows.append([texts_name, base, new, new / base, row["bit_equal"]])
    print(table(["texts", "with guards", "without", "ratio", "same vectors"], rows, digits=3))
    write_record(args.output, meta, record)
    return 0 if all(r["bit_equal"] for r in record["rows"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
