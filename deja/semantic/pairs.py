"""Labelled pair files: ``{"a", "b", "duplicate"}`` JSONL rows (``a`` is cached, ``b`` asks),
read with every bad row named, for ``deja calibrate``, ``deja labels`` and ``training/verifier``."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class PairRow(Protocol):
    """Anything with the three fields of a labelled pair (read-only)."""

    @property
    def a(self) -> str: ...

    @property
    def b(self) -> str: ...

    @property
    def duplicate(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Pair:
    """One labelled pair: ``a`` is cached, ``b`` asks; ``duplicate``: one answer serves both."""

    a: str
    b: str
    duplicate: bool


#: At most this many bad rows are listed (then a count): enough to fix a file in one pass.
MAX_LISTED_ROWS = 20


def _row_problem(line: str) -> tuple[Pair | None, str | None]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg})"
    if not isinstance(row, dict):
        return None, "expected a JSON object"
    for name, kind in (("a", str), ("b", str), ("duplicate", bool)):
        if name not in row:
            return None, f"missing field {name!r}"
        if not isinstance(row[name], kind):
            return None, f"field {name!r} must be {kind.__name__}, got {type(row[name]).__name__}"
    return Pair(row["a"], row["b"], row["duplicate"]), None


def read_pairs(path: Path) -> list[Pair]:
    """``{"a", "b", "duplicate"}`` rows of a JSONL file (``.gz`` too). Raises ``ValueError``
    listing every row (file and line) that is not JSON, not an object, lacks a field or has a
    field of the wrong type, so a file is fixed in one pass."""
    opener = gzip.open if path.suffix == ".gz" else open
    rows: list[Pair] = []
    bad: list[str] = []
    with opener(path, "rt", encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            pair, problem = _row_problem(line)
            if problem is not None:
                bad.append(f"{path}:{number}: {problem}")
            elif pair is not None:
                rows.append(pair)
    if bad:
        listed = bad[:MAX_LISTED_ROWS]
        more = len(bad) - len(listed)
        tail = [f"... and {more} more"] if more else []
        raise ValueError("\n".join([f"{len(bad)} bad row(s) in {path}:", *listed, *tail]))
    if not rows:
        raise ValueError(f"{path}: no pairs")
    return rows
