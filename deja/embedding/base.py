"""The embedder interface of the semantic layer.

Embedding is CPU work: implementations run it off the event loop. Vectors are L2-normalised, so
a dot product is the cosine similarity.
"""

from __future__ import annotations

from typing import Protocol


class Embedder(Protocol):
    """Turns text into unit vectors. ``model_id`` and ``dim`` identify the vector space: a query
    is only ever compared with vectors of the same identity."""

    model_id: str
    dim: int

    async def embed(self, text: str) -> list[float]:
        """One text's unit vector, computed off the event loop (possibly batched with others)."""

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        """Unit vectors for many texts, synchronously (benchmarks, offline tools)."""

    async def close(self) -> None:
        """Stop background work and release the model."""
