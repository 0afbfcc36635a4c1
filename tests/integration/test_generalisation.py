"""The shipped verifier and decision on a hand-written set beside Quora
(``tests/data/generalisation.jsonl``): everyday paraphrases and close-but-different pairs
(symbols, numbers, units, ordinals, entities, role and direction swaps, antonyms, negation,
narrower and wider questions), English and Spanish.

The bar, at the default precision target (``DEJA_SEMANTIC_PRECISION`` = 0.92): no
close-but-different pair is served, and at least 60% of the paraphrases are. Each pair is
decided as the gateway decides one cached question for one query: cosine at or above the
table's floor, the same words served unverified, else the verifier's logit and the mismatch
signals scored by the table against τ. The set was written by hand after the training rules and
before any model was run on it, and is never used for training or fitting
(``training/verifier``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from config.caching import CacheSettings
from deja.embedding.onnx.embedder import load_onnx_embedder
from deja.semantic.crossencoder import SHIPPED_DIR, load_verifier
from deja.semantic.cutoffs import CALIBRATION_FILE, load_table
from deja.semantic.index import ScoredPoint
from deja.semantic.verifier import rank, same_words
from tests.support import MODEL_DIR

pytestmark = pytest.mark.integration

SET = Path(__file__).resolve().parents[1] / "data" / "generalisation.jsonl"


def load_set() -> list[dict[str, object]]:
    return [json.loads(line) for line in SET.read_text(encoding="utf-8").splitlines() if line]


def test_the_set_is_balanced_and_bilingual() -> None:
    rows = load_set()
    assert 150 <= len(rows) <= 300
    kinds = {str(r["kind"]) for r in rows}
    assert {"paraphrase", "symbol", "role_swap", "entity", "number", "antonym"} <= kinds
    for lang in ("en", "es"):
        assert sum(r["lang"] == lang and r["duplicate"] for r in rows) >= 30
        assert sum(r["lang"] == lang and not r["duplicate"] for r in rows) >= 30
    assert all(bool(r["duplicate"]) == (r["kind"] == "paraphrase") for r in rows)


@pytest.fixture(scope="module")
async def decided() -> list[tuple[dict[str, object], bool]]:
    """Every row of the set with whether the shipped decision serves it at the default target."""
    rows = load_set()
    table = load_table(SHIPPED_DIR / CALIBRATION_FILE)
    tau = table.tau(CacheSettings.model_fields["semantic_precision"].default)
    embedder = load_onnx_embedder(MODEL_DIR)
    verifier = load_verifier(max_tokens=table.max_tokens)
    try:
        a = np.asarray(embedder.embed_batch([str(r["a"]) for r in rows]))
        b = np.asarray(embedder.embed_batch([str(r["b"]) for r in rows]))
        served: list[bool] = []
        for i, row in enumerate(rows):
            query, cached = str(row["b"]), str(row["a"])
            point = ScoredPoint(f"e{i}", float(a[i] @ b[i]), {"question": cached})
            if point.score < table.cosine_floor:
                served.append(False)
            elif same_words(query, cached):
                served.append(True)
            else:
                logits = await verifier.logits(query, [cached])
                best = rank(table, query, [point], logits)[0]
                served.append((best.score or 0.0) >= tau)
    finally:
        await verifier.close()
        await embedder.close()
    return list(zip(rows, served, strict=True))


def test_no_close_but_different_pair_is_served(
    decided: list[tuple[dict[str, object], bool]],
) -> None:
    wrong = [(r["kind"], r["a"], r["b"]) for r, s in decided if s and not r["duplicate"]]
    assert wrong == [], f"close-but-different pairs served: {wrong}"


@pytest.mark.xfail(
    strict=True,
    reason="issue 20, not met by the shipped model: at 0.92 it serves 34 of 105 everyday "
    "paraphrases; strict, so a model that passes the bar turns this into a failure until the "
    "mark is removed",
)
def test_most_everyday_paraphrases_are_served(
    decided: list[tuple[dict[str, object], bool]],
) -> None:
    paraphrases = [s for r, s in decided if r["duplicate"]]
    share = sum(paraphrases) / len(paraphrases)
    assert share >= 0.60, f"only {share:.0%} of the everyday paraphrases served"
