"""Embed question texts with the project's ONNX embedder (all-MiniLM-L6-v2, dynint8) and cache
the unit vectors as ``.npy`` (+ the texts as JSON) under ``.cache/emb/``.

Run it with the PROJECT venv (it imports the gateway's embedder, no torch):
``.venv/bin/python -m training.verifier.embed --split val dev``.
Later steps only read the cache (see :func:`load_embeddings`), so they keep working when the
gateway's module paths move.
"""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from training.verifier.common import CACHE, DATA, Progress, read_pairs

EMB = CACHE / "emb"
GEN = CACHE.parents[2] / "tests" / "data" / "generalisation.jsonl"
#: a later probe, written after the generalisation set and disjoint from it (no shared text)
RED = GEN.with_name("red_team.jsonl")
#: queries as people type them (lower case, often no question mark): the first round led to
#: the verifier's question mark and the closed name classes, the later one was written after them
TYPED = GEN.with_name("typed_probe.jsonl")
TYPED_LATER = GEN.with_name("typed_probe_later.jsonl")
EMBEDDER_MODULES = ("deja.embedding.onnx.embedder",)


def split_file(name: str) -> Path:
    return {
        "train": DATA / "qqp_train.jsonl.gz",
        "val": CACHE / "val.jsonl",
        "dev": DATA / "qqp_dev.jsonl",
    }.get(name, Path(name))


def split_texts(name: str) -> list[str]:
    """Distinct question texts (a's and b's) of a split, in first-seen order."""
    seen: dict[str, None] = {}
    for p in read_pairs(split_file(name)):
        seen.setdefault(p.a, None)
        seen.setdefault(p.b, None)
    return list(seen)


def load_embeddings(name: str) -> dict[str, np.ndarray]:
    """text -> unit vector (float32, 384) from the cache written by this script."""
    texts = json.loads((EMB / f"{name}.texts.json").read_text())
    vecs = np.load(EMB / f"{name}.npy")
    if len(texts) != len(vecs):
        raise ValueError(f"embedding cache {name} is inconsistent")
    return {t: vecs[i] for i, t in enumerate(texts)}


def load_embedder(cache_dir: Path) -> Any:
    last: Exception | None = None
    for mod in EMBEDDER_MODULES:
        try:
            m = importlib.import_module(mod)
            return m.load_onnx_embedder(cache_dir, threads=1, variant="dynint8")
        except ImportError as exc:
            last = exc
    raise SystemExit(f"no ONNX embedder importable ({last}); the cache in {EMB} is needed")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--split",
        nargs="+",
        default=[
            "val",
            "dev",
            str(CACHE / "val_extra.jsonl"),
            str(CACHE / "mrpc_test.jsonl"),
            str(CACHE / "val_synonym.jsonl"),
            str(GEN),
            str(RED),
            str(TYPED),
            str(TYPED_LATER),
        ],
        help="split names (train, val, dev) or JSONL paths",
    )
    ap.add_argument("--force", action="store_true", help="re-embed even when cached")
    ap.add_argument("--chunk", type=int, default=256)
    args = ap.parse_args(argv)
    EMB.mkdir(parents=True, exist_ok=True)
    embedder = load_embedder(CACHE / "embedder")
    print(f"[embed] embedder {embedder.vectors_id}", flush=True)
    for name in args.split:
        out = EMB / f"{Path(name).stem if '/' in name else name}.npy"
        texts = split_texts(name)
        tfile = out.with_suffix(".texts.json")
        # the vectors' id (model and derivation recipe) beside each split: a new recipe
        # re-embeds instead of reusing vectors of another quantisation
        idfile = out.with_suffix(".vectors_id")
        if (
            out.exists()
            and tfile.exists()
            and not args.force
            and idfile.exists()
            and idfile.read_text() == embedder.vectors_id
            and json.loads(tfile.read_text()) == texts
        ):
            print(f"[embed] {name}: cached ({len(texts)} texts)", flush=True)
            continue
        vecs = np.zeros((len(texts), 384), dtype=np.float32)
        prog = Progress(f"embed {name}", len(texts))
        for i in range(0, len(texts), args.chunk):
            chunk = texts[i : i + args.chunk]
            vecs[i : i + len(chunk)] = np.asarray(embedder.embed_batch(chunk), dtype=np.float32)
            prog.update(i + len(chunk))
        np.save(out, vecs)
        tfile.write_text(json.dumps(texts))
        idfile.write_text(embedder.vectors_id)
        print(f"[embed] {name}: wrote {out} {vecs.shape}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
