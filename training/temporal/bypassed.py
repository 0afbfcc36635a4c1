"""How many questions of each set the temporal rules bypass (``deja.temporal.rules``), and which.

Sets: the labelled questions (``questions.jsonl`` per split and label, ``temporal_dev.jsonl``,
``tests/data/temporal_probe.jsonl`` per kind), and unlabelled everyday and Quora questions whose
bypass costs a hit (both sides of ``tests/data`` pair files, ``qqp_dev.jsonl``, the distinct
questions of ``qqp_train.jsonl.gz``). Rules only: the classifier needs the embedder
(``train.py`` reports it).

    .venv/bin/python training/temporal/bypassed.py                 # counts per set
    .venv/bin/python training/temporal/bypassed.py --list FILE.tsv # also every verdict

Two checkouts' ``--list`` files diff to the questions a rule change moves.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from deja.temporal.rules import TemporalDetector

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SHARED = REPO.parent / "shared" / "data"
TEST_DATA = REPO / "tests" / "data"
PAIR_SETS = ("generalisation", "red_team", "typed_probe", "typed_probe_later")


def _lines(path: Path) -> Iterator[dict[str, object]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def sets() -> dict[str, list[str]]:
    """Set name -> its distinct questions, in first-seen order."""
    out: dict[str, dict[str, None]] = {}

    def add(name: str, text: object) -> None:
        if isinstance(text, str):
            out.setdefault(name, {})[text] = None

    def label(row: dict[str, object]) -> str:
        return "volatile" if row["volatile"] else "timeless"

    for row in _lines(HERE / "questions.jsonl"):
        add(f"questions {row['split']} {label(row)}", row["query"])
    if (SHARED / "temporal_dev.jsonl").exists():
        for row in _lines(SHARED / "temporal_dev.jsonl"):
            add(f"temporal_dev {label(row)}", row["query"])
    for row in _lines(TEST_DATA / "temporal_probe.jsonl"):
        add(f"temporal_probe {row['kind']}", row["query"])
    for name in PAIR_SETS:
        for row in _lines(TEST_DATA / f"{name}.jsonl"):
            add(name, row["a"])
            add(name, row["b"])
    for path in (SHARED / "qqp_dev.jsonl", SHARED / "qqp_train.jsonl.gz"):
        if path.exists():
            for row in _lines(path):
                add(path.name, row["a"])
                add(path.name, row["b"])
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
