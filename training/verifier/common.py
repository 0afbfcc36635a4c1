"""Shared helpers of the verifier pipeline: paths, pair files (read with the gateway's own
validating reader, re-exported here), progress lines with ETA."""

from __future__ import annotations

import gzip
import json
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from deja.semantic.pairs import Pair as Pair
from deja.semantic.pairs import read_pairs as read_pairs

SEED = 1234
REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"
RUNS = HERE / "runs"
#: The shared data folder beside the repository (``../shared/data``).
DATA = REPO.parent / "shared" / "data"
ARTIFACTS = REPO / "deja" / "models" / "verifier"
MAX_TOKENS = 64


def read_json_rows(path: Path) -> list[dict[str, object]]:
    """Every row of a JSONL file (``.gz`` too) as a dict, all fields kept (``read_pairs``
    keeps a/b/duplicate only)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def write_json_rows(path: Path, rows: Iterable[dict[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)


def write_pairs(path: Path, pairs: list[Pair]) -> None:
    write_json_rows(path, ({"a": p.a, "b": p.b, "duplicate": p.duplicate} for p in pairs))


class Progress:
    """Prints ``label i/n (pct) rate/s ETA mm:ss`` at most every ``every`` seconds."""

    def __init__(self, label: str, total: int, every: float = 10.0) -> None:
        self.label = label
        self.total = max(total, 1)
        self.every = every
        self.start = time.monotonic()
        self.last = 0.0

    def update(self, done: int, extra: str = "", force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < self.every and done < self.total:
            return
        self.last = now
        elapsed = now - self.start
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - done) / rate if rate > 0 else float("nan")
        eta_s = f"{int(eta // 60):d}:{int(eta % 60):02d}" if eta == eta else "?"
        print(
            f"[{self.label}] {done}/{self.total} ({100 * done / self.total:.1f}%) "
            f"{rate:.1f}/s elapsed {elapsed / 60:.1f}m ETA {eta_s} {extra}".rstrip(),
            flush=True,
            file=sys.stdout,
        )
