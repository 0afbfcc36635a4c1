"""The temporal classifier on real query embeddings: it catches volatile questions no rule
lists, leaves ordinary ones alone, and refuses vectors from another embedding space."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from deja.embedding.onnx.embedder import load_onnx_embedder
from deja.temporal.classifier import SHIPPED_FILE, load_classifier
from deja.temporal.rules import TemporalDetector
from tests.support import MODEL_DIR

pytestmark = pytest.mark.integration


def test_classifier_catches_what_the_rules_miss() -> None:
    embedder = load_onnx_embedder(MODEL_DIR)
    classifier = load_classifier(embedder.model_id)
    assert classifier is not None
    rules = TemporalDetector()
    volatile, timeless = "Is Twitter working?", "How do I bake bread?"
    assert rules.check(volatile) is None  # no rule lists it...
    vectors = embedder.embed_batch([volatile, timeless])
    assert classifier.volatile(vectors[0])  # ...the classifier does
    assert not classifier.volatile(vectors[1])
    assert not classifier.volatile(vectors[0][:10])  # a vector of another size never fires


def test_another_embedding_space_or_a_broken_file_means_rules_only(tmp_path: Path) -> None:
    assert load_classifier("paraphrase-multilingual-mpnet") is None
    broken = tmp_path / "classifier.json"
    broken.write_text("{")
    assert load_classifier("all-MiniLM-L6-v2-dynint8", broken) is None
    doc = orjson.loads(SHIPPED_FILE.read_bytes())
    assert len(doc["weights"]) == doc["dim"] == 384 and 0.5 <= doc["threshold"] < 1
