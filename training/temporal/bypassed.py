"""How many questions of each set the temporal rules bypass (``deja.temporal.rules``), and which.

Sets: the labelled questions (``questions.jsonl`` per split and label, ``temporal_dev.jsonl``,
``tests/data/temporal_probe.jsonl`` per kind), and unlabelled everyday and Quora questions whose
bypass costs a hit (both sides of ``tests/data`` pair files, ``qqp_dev.jsonl``, the distinct
questions of ``qqp_train.jsonl.gz``). Rules only: the classifier needs the embedder
(``train.py`` reports it).

    .venv/bin/python -m training.temporal.bypassed                 # counts per set
    .venv/bin/python -m training.temporal.bypassed --list FILE.tsv # also every verdict

Two checkouts' ``--list`` files diff to the questions a rule change moves.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from deja.semantic.pairs import read_pairs
from deja.temporal.rules import TemporalDetector
from training.temporal.train import DEFAULT_DEV, HERE, REPO, load_dev, load_questions

SHARED = REPO.parent / "shared" / "data"
TEST_DATA = REPO / "tests" / "data"
PAIR_SETS = ("generalisation", "red_team", "typed_probe", "typed_probe_later")


def sets() -> dict[str, list[str]]:
    """Set name -> its distinct questions, in first-seen order."""
    out: dict[str, dict[str, None]] = {}

    def add(name: str, text: str) -> None:
        out.setdefault(name, {})[text] = None

    for row in load_questions(HERE / "questions.jsonl"):
        add(f"questions {row.split} {'volatile' if row.volatile else 'timeless'}", row.query)
    if DEFAULT_DEV.exists():
        for row in load_dev(DEFAULT_DEV):
            add(f"temporal_dev {'volatile' if row.volatile else 'timeless'}", row.query)
    probe = TEST_DATA / "temporal_probe.jsonl"
    for line in probe.read_text(encoding="utf-8").splitlines():
        if line.strip():
            doc = json.loads(line)
            add(f"temporal_probe {doc['kind']}", doc["query"])
    paths = [TEST_DATA / f"{name}.jsonl" for name in PAIR_SETS]
    paths += [p for p in (SHARED / "qqp_dev.jsonl", SHARED / "qqp_train.jsonl.gz") if p.exists()]
    for path in paths:
        name = path.stem if path.parent == TEST_DATA else path.name
        for pair in read_pairs(path):
            add(name, pair.a)
            add(name, pair.b)
    return {name: list(texts) for name, texts in out.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--list", type=Path, help="write 'set, bypassed, matched, question' rows")
    args = parser.parse_args(argv)
    detector = TemporalDetector()
    rows: list[str] = []
    for name, texts in sets().items():
        found = [detector.check(t) for t in texts]
        print(f"{name:32s} {sum(f is not None for f in found):6d} of {len(texts):6d} bypassed")
        rows += [
            f"{name}\t{int(f is not None)}\t{f.matched if f else ''}\t{t}"
            for t, f in zip(texts, found, strict=True)
        ]
    if args.list is not None:
        args.list.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
        print(f"wrote {args.list}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
