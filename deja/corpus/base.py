"""Corpora: the documents a tenant's RAG requests retrieve from (step 5 of the request path).

This module is the contract between ingestion (``deja corpus …``, the admin API) and the
request path: what a chunk is, what retrieval returns, what a provenance record names, and
what a change to a document tells the cache so it can drop the answers built from it.

A document belongs to one corpus of one tenant. Its ``version`` starts at 1 and grows by one
each time its content (by hash) changes; re-ingesting identical content changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Chunk:
    """One retrievable piece of a document."""

    tenant: str
    corpus: str
    document: str
    version: int
    #: Position in the document, from 0: with ``document`` it fixes the context order.
    index: int
    text: str
    #: The heading path the chunk sits under ("Guide > Install"), "" when none.
    title: str = ""
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RetrievedChunk:
    chunk: Chunk
    #: Cosine similarity to the question (whatever ranked it: the relevance floor's measure);
    #: never used to order the context.
    score: float


@dataclass(frozen=True, slots=True)
class SourceRef:
    """A (document, version) an answer was built from: its provenance."""

    corpus: str
    document: str
    version: int

    def key(self) -> str:
        """``corpus/document`` — what invalidation matches on, whatever the version."""
        return f"{self.corpus}/{self.document}"

    def label(self) -> str:
        """``document@version``, as sent in ``X-Deja-Sources``."""
        return f"{self.document}@{self.version}"


@dataclass(frozen=True, slots=True)
class DocumentChange:
    """A document that was added (``old_version`` None), changed, or removed (``new_version``
    None). Answers built from ``old_version`` are now stale; answers to questions near
    ``vectors`` may be too: the new content's chunk embeddings, or for a removed document the
    embeddings of the chunks it had (a question near them lost what answered it)."""

    tenant: str
    corpus: str
    document: str
    old_version: int | None
    new_version: int | None
    vectors: list[list[float]] = field(default_factory=list, compare=False, repr=False)

    def key(self) -> str:
        return f"{self.corpus}/{self.document}"


def context_order(chunks: list[RetrievedChunk]) -> list[RetrievedChunk]:
    """The order chunks appear in a prompt: document id, then chunk index — never the score,
    so every question that retrieves the same chunks builds the same prompt prefix."""
    return sorted(chunks, key=lambda r: (r.chunk.document, r.chunk.index))


def sources_of(chunks: list[RetrievedChunk]) -> list[SourceRef]:
    """The distinct (document, version) pairs of ``chunks``, sorted."""
    refs = {SourceRef(r.chunk.corpus, r.chunk.document, r.chunk.version) for r in chunks}
    return sorted(refs, key=lambda s: (s.corpus, s.document, s.version))


def newest_only(chunks: list[RetrievedChunk]) -> list[RetrievedChunk]:
    """``chunks`` without those of a document's older version when a newer one is among them,
    order kept. While a document is being replaced both versions are briefly stored (the new
    chunks are written before the old ones are deleted); a reader never mixes the two."""
    newest: dict[tuple[str, str], int] = {}
    for r in chunks:
        key = (r.chunk.corpus, r.chunk.document)
        newest[key] = max(newest.get(key, 0), r.chunk.version)
    return [r for r in chunks if r.chunk.version == newest[(r.chunk.corpus, r.chunk.document)]]
