"""The second half of the temporal bypass: a logistic classifier on the query embedding the
semantic layer computes anyway (≈0 ms: one 384-term dot product).

The rules (``deja.temporal.rules``) catch the expressions they list; the classifier catches
paraphrases they do not ("how much is a bitcoin worth", "¿a cuánto está el euro?"). The runtime
decision is rules OR classifier. Trained by ``training/temporal/train.py`` on questions the
project wrote itself (English and Spanish, with timeless traps), its threshold chosen for
precision so it adds few false bypasses; figures in ``training/temporal/README.md``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import orjson

log = logging.getLogger("deja.temporal")

#: The shipped classifier (package data).
SHIPPED_FILE = Path(__file__).resolve().parents[1] / "models" / "temporal" / "classifier.json"
#: Vectors from variants of this model (re-quantised or as shipped: cosine ≥ 0.985 between
#: them) share the space the classifier was trained in.
MODEL_FAMILY = "all-MiniLM-L6-v2"


@dataclass(frozen=True, slots=True)
class TemporalClassifier:
    """``sigmoid(weights · v + bias) >= threshold`` on the unit embedding ``v``."""

    weights: npt.NDArray[np.float32]
    bias: float
    threshold: float

    def probability(self, vector: list[float]) -> float:
        z = float(np.dot(self.weights, np.asarray(vector, dtype=np.float32))) + self.bias
        return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))

    def volatile(self, vector: list[float]) -> bool:
        return len(vector) == len(self.weights) and self.probability(vector) >= self.threshold


def load_classifier(embedder_model_id: str, path: Path = SHIPPED_FILE) -> TemporalClassifier | None:
    """The classifier for vectors of ``embedder_model_id``, or None (rules only) when the file
    is unreadable or was trained in another embedding space — said once, loudly."""
    try:
        doc = orjson.loads(path.read_bytes())
        weights = np.asarray(doc["weights"], dtype=np.float32)
        classifier = TemporalClassifier(weights, float(doc["bias"]), float(doc["threshold"]))
        trained_for = str(doc["embedder_model_id"])
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        log.warning("temporal classifier %s unusable (%s): rules only", path, exc)
        return None
    if not embedder_model_id.startswith(MODEL_FAMILY) or not trained_for.startswith(MODEL_FAMILY):
        log.warning(
            "temporal classifier was trained on %s vectors, the embedder is %s: rules only",
            trained_for,
            embedder_model_id,
        )
        return None
    return classifier
