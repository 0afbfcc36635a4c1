"""Shared helpers of the verifier pipeline: paths, seeded RNG, JSONL I/O with validation,
progress lines with ETA. Standard library + numpy only (usable from every venv)."""

from __future__ import annotations

import gzip
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SEED = 1234
REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"
RUNS = HERE / "runs"
#: The shared data folder beside the repository (``../shared/data``).
DATA = REPO.parent / "shared" / "data"
ARTIFACTS = REPO / "deja" / "models" / "verifier"
MAX_TOKENS = 64


@dataclass(frozen=True)
class Pair:
    a: str
    b: str
    duplicate: bool


class DataError(ValueError):
    """A malformed input row (the message names the file and line)."""


def _open(path: Path) -> Iterator[str]:
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            yield from fh
    else:
        with path.open(encoding="utf-8") as fh:
            yield from fh


def read_pairs(path: Path) -> list[Pair]:
    """Read ``{"a", "b", "duplicate"}`` rows; raise :class:`DataError` with the line number
    on a row that is not an object, lacks a field or has a wrong type."""
    out: list[Pair] = []
    for lineno, line in enumerate(_open(path), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from exc
        if not isinstance(row, dict):
            raise DataError(f"{path}:{lineno}: expected a JSON object")
        for key, typ in (("a", str), ("b", str), ("duplicate", bool)):
            if key not in row:
                raise DataError(f"{path}:{lineno}: missing field {key!r}")
            if not isinstance(row[key], typ):
                raise DataError(
                    f"{path}:{lineno}: field {key!r} must be {typ.__name__}, "
                    f"got {type(row[key]).__name__}"
                )
        out.append(Pair(row["a"], row["b"], row["duplicate"]))
    return out


def write_pairs(path: Path, pairs: list[Pair]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for p in pairs:
            fh.write(json.dumps({"a": p.a, "b": p.b, "duplicate": p.duplicate}) + "\n")


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
