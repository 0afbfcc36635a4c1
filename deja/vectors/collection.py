"""The contract of the vector layer: one collection of points (an id, a vector, a JSON payload)
with payload indexes, cosine distance, and every call mapped to ``VectorStoreError``.

Both backends implement it (``deja.vectors.edge.EdgeCollection``,
``deja.vectors.qdrant.QdrantCollection``); one contract suite runs on both
(``tests/integration/test_vectors.py``). A caller passes ``maintenance=True`` for the calls off
the request path (bulk writes, listings, sweeps): a server backend then allows them its longer
timeout; the embedded backend has none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from deja.vectors.filters import Filter

#: The payload indexes a schema asks for: keyword, keyword that partitions the data by tenant
#: (the optimizer co-locates by it), integer, float.
IndexKind = Literal["keyword", "tenant", "integer", "float"]
Indexes = dict[str, IndexKind]


#: The name of the sparse (lexical) vector of a collection that has one; the dense vector is
#: the unnamed default, so a collection created before sparse vectors existed keeps working.
SPARSE_VECTOR = "bm25"


@dataclass(frozen=True, slots=True)
class Sparse:
    """A sparse vector: term ids (hashed tokens) and their weights. The backend multiplies a
    document's weights by the term's IDF over the collection (Qdrant's ``idf`` modifier)."""

    indices: list[int]
    values: list[float]


@dataclass(frozen=True, slots=True)
class Point:
    """One point to upsert: a UUID (or integer) id, its vector and payload, and its sparse
    vector in a collection that has one (ignored by one that has not)."""

    id: str
    vector: list[float]
    payload: dict[str, Any]
    sparse: Sparse | None = None


@dataclass(frozen=True, slots=True)
class Hit:
    """A search result: cosine similarity in [-1, 1] (a sparse search: the BM25 score) and the
    stored payload; the point id, and its dense vector when it was asked for."""

    score: float
    payload: dict[str, Any]
    id: str = ""
    vector: list[float] | None = field(default=None, compare=False, repr=False)


class Collection(Protocol):
    """One collection, as a schema's store uses it."""

    #: The backend's name, as logs and ``deja doctor`` show it: ``qdrant-edge`` or ``qdrant``.
    name: str
    #: The collection's name.
    collection: str
    #: True when other processes may change it (a Qdrant server): readers then re-read.
    shared: bool
    #: True once open when the collection holds the sparse vector ``SPARSE_VECTOR`` (asked for
    #: with ``sparse=True`` and, for an existing collection, created with it).
    sparse: bool

    async def open(self) -> None:
        """Create the collection and its payload indexes when missing, else load it
        (idempotent); a collection of another dimension is refused."""

    async def upsert(self, points: list[Point], *, maintenance: bool = False) -> None:
        """Insert or replace points (by id), as one update."""

    async def search(
        self, vector: list[float], where: Filter | None, *, limit: int, maintenance: bool = False
    ) -> list[Hit]:
        """The ``limit`` nearest points matching ``where`` (inside the search), best first."""

    async def search_sparse(
        self, sparse: Sparse, where: Filter | None, *, limit: int, with_vector: bool = False
    ) -> list[Hit]:
        """The ``limit`` best points by sparse dot product (IDF-weighted), best first, with
        their dense vectors when ``with_vector``; ``VectorStoreError`` without a sparse vector."""

    async def vectors(self, where: Filter) -> list[list[float]]:
        """The dense vectors of every point matching ``where`` (maintenance)."""

    async def delete_ids(self, ids: list[str]) -> None:
        """Remove points by id; missing ids are ignored."""

    async def delete(self, where: Filter) -> int:
        """Remove every point matching ``where``; returns how many were counted just before."""

    async def take(self, where: Filter, field: str) -> list[str]:
        """Remove every point matching ``where``; returns their ``field`` payload values."""

    async def scroll(
        self, where: Filter | None, *, leave_out: tuple[str, ...] = ()
    ) -> list[dict[str, Any]]:
        """Every matching point's payload, without the ``leave_out`` fields."""

    async def facet(self, key: str, *, limit: int) -> dict[str, int]:
        """The values of a keyword field with how many points hold each (zero counts dropped)."""

    async def count(self, where: Filter | None = None, *, maintenance: bool = False) -> int:
        """How many points match ``where`` (all when None)."""

    async def close(self) -> None:
        """Release what the collection created (flush to disk for the embedded one);
        idempotent, and every later call raises ``VectorStoreError``."""


@dataclass(frozen=True, slots=True)
class Schema:
    """A payload schema on the layer, as far as the layer needs to know it: the name prefix
    of its collections, the payload indexes they get, and whether its points carry the sparse
    vector ``SPARSE_VECTOR`` beside the dense one (for hybrid search)."""

    prefix: str
    indexes: Indexes
    sparse: bool = False

    def collection(self, embedder_id: str, dim: int) -> str:
        """A collection per schema, embedder identity and dimension, so vectors of different
        models never meet: e.g. ``deja_all-minilm-l6-v2-int8_384``."""
        safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in embedder_id.lower())
        return f"{self.prefix}_{safe}_{dim}"
