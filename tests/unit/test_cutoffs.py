"""Calibration tables: loading, validation, and the precision target → cut-off mapping."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from deja.errors import VerifierError
from deja.semantic.crossencoder import SHIPPED_DIR
from deja.semantic.cutoffs import load_table, parse_table, sigmoid

DOC: dict[str, Any] = {
    "k": 4,
    "cosine_floor": 0.7,
    "max_tokens": 64,
    "decision": "combined",
    "combined": {"w_logit": 2.0, "w_cosine": 10.0, "bias": -9.0},
    "table": [
        {"precision": 0.80, "tau": 0.50, "hit_rate": 0.45},
        {"precision": 0.85, "tau": 0.60, "hit_rate": 0.40},
        {"precision": 0.90, "tau": 0.75, "hit_rate": 0.30},
        {"precision": 0.95, "tau": 0.90, "hit_rate": 0.10},
        {"precision": 0.97, "tau": None, "hit_rate": None},
    ],
}


def test_a_target_takes_the_next_grid_row_up() -> None:
    table = parse_table(DOC, Path("t.json"))
    assert table.tau(0.80) == 0.50
    assert table.tau(0.85) == 0.60
    assert table.tau(0.86) == 0.75  # between rows: the stricter one
    assert table.tau(0.90) == 0.75
    assert table.tau(0.92) == 0.90
    assert table.tau(0.5) == 0.50  # below the table: its least cut-off
    assert math.isinf(table.tau(0.97))  # never measured: nothing passes
    assert math.isinf(table.tau(0.99))
    assert table.targets == (0.80, 0.95)


def test_decision_scores() -> None:
    combined = parse_table(DOC, Path("t.json"))
    assert combined.score(1.0, 0.8) == pytest.approx(sigmoid(2.0 + 8.0 - 9.0))
    plain = parse_table({**DOC, "decision": "verifier", "combined": None}, Path("t.json"))
    assert plain.score(0.0, 0.99) == pytest.approx(0.5)


@pytest.mark.parametrize(
    "broken",
    [
        [],
        {"k": 4},
        {**DOC, "table": []},
        {**DOC, "k": "four"},
        {**DOC, "decision": "vibes"},
        {**DOC, "table": [{"precision": "high", "tau": 0.5}]},
        {**DOC, "table": [{"precision": 0.9, "tau": "x"}]},
    ],
)
def test_broken_tables_are_refused_with_a_reason(broken: Any) -> None:
    with pytest.raises(VerifierError, match="calibration table"):
        parse_table(broken, Path("t.json"))


def test_unreadable_file(tmp_path: Path) -> None:
    (tmp_path / "c.json").write_text("{not json")
    with pytest.raises(VerifierError, match="cannot read calibration table"):
        load_table(tmp_path / "c.json")


def test_the_shipped_table_is_monotone_and_covers_the_promised_range() -> None:
    table = load_table(SHIPPED_DIR / "calibration.json")
    taus = [table.tau(p / 100) for p in range(80, 96)]
    finite = [t for t in taus if math.isfinite(t)]
    assert finite == sorted(finite)  # a stricter target never lowers the cut-off
    assert table.k >= 1 and 0 < table.cosine_floor < 1
    doc = orjson.loads((SHIPPED_DIR / "calibration.json").read_bytes())
    assert doc["model_sha256"] == table.model_sha256
