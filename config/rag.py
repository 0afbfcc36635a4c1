"""The corpora's and retrieval's settings (RAG): chunking, ingestion limits, the start-up
preload, and how a request retrieves and builds its prompt. A section of
``config.settings.Settings``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import NoDecode

from config.values import Bytes, Count, NonNegativeInt, PositiveFloat


class RagSettings(BaseModel):
    """Corpora and asking with retrieval."""

    # --- corpora (issue 11) -----------------------------------------------------------------------
    corpora_enabled: bool = Field(
        True,
        description="Keep document corpora for RAG (`deja corpus …`, /admin/corpora): chunks in "
        "their own collection of the semantic store (Qdrant Edge under data_dir, or the Qdrant "
        "server); loads the embedder even with the semantic cache off.",
    )
    corpus_chunk_tokens: int = Field(
        200,
        ge=32,
        le=512,
        description="Token budget of one chunk, its heading path included (MiniLM reads 256).",
    )
    corpus_chunk_overlap: NonNegativeInt = Field(
        32, description="Tokens a chunk repeats from the end of the one before it."
    )
    corpus_max_file_bytes: Bytes = Field(
        20 * 1024 * 1024, description="Largest file ingested; larger ones are refused."
    )
    corpus_max_pages: Count = Field(
        500, description="Most pages of a PDF ingested; a longer one is refused unread."
    )
    corpus_max_chunks: Count = Field(
        2000, description="Most chunks one document may make; more is refused."
    )
    corpus_parse_cpu_seconds: Count = Field(
        30,
        description="CPU seconds a PDF's parse may take, in its own worker process (killed "
        "past it, or when the ingesting client goes away): a 33 KB PDF once took 205 s.",
    )
    corpus_embed_batch: int = Field(
        32, ge=1, le=1024, description="Chunks embedded per call during ingestion."
    )
    corpus_embed_threads: int = Field(
        2,
        ge=1,
        le=64,
        description="Threads that embed one batch of an ingest at once, each text on its own "
        "(vectors do not depend on it); 2 uses both cores of a 2-core machine: 1.5-1.7x the "
        "chunks/s of one at load 2-4, none at load 4.4, where a question's embedding p99 "
        "during the ingest rose from 14-20 to 20-27 ms; 1 keeps a core for the request path.",
    )
    rag_retrieval_timeout_seconds: PositiveFloat = Field(
        1.0, description="Budget of one retrieval from a corpus; past it, RetrievalError."
    )
    corpus_refresh_seconds: PositiveFloat = Field(
        30.0,
        description="How often the corpus list is re-read from a shared Qdrant server (other "
        "gateways' ingests).",
    )
    corpus_preload: Annotated[dict[str, list[str]], NoDecode] = Field(
        default_factory=dict,
        description="Corpora ingested at start-up for corpus_preload_tenant: "
        "'name=path,path;name2=path' in the environment, a mapping of name to paths in YAML. "
        "Idempotent: unchanged files are skipped, so a restart is fast.",
    )
    corpus_preload_follow_symlinks: bool = Field(
        False,
        description="Let the preload read what symbolic links point to outside the paths named "
        "(off: such links are refused and logged, so a link to /etc/passwd never reaches a "
        "prompt).",
    )
    corpus_preload_tenant: str = Field(
        "default", min_length=1, description="The tenant that owns the preloaded corpora."
    )

    # --- RAG: asking with retrieval (issue 11) ---------------------------------------------------
    rag_top_k: int = Field(
        4,
        ge=1,
        le=64,
        description="The most chunks put in a RAG prompt (fewer when fewer pass the floor).",
    )
    rag_search: Literal["dense", "hybrid", "sparse"] = Field(
        "dense",
        description="How a question searches its corpus: dense (MiniLM cosine), hybrid (dense "
        "and sparse BM25 term weights, IDF from the store, fused by reciprocal rank fusion) "
        "or sparse alone. Dense by bench/retrieval.py: on held-out WikiQA hybrid put the "
        "answer chunk first for 79.0% of questions against dense's 82.4% (sparse 69.5%).",
    )
    rag_min_score: float = Field(
        0.3,
        ge=-1.0,
        le=1.0,
        description="Relevance floor: the least cosine to the question a chunk needs to go "
        "into the prompt (and be a source). 0.3 on bench/retrieval.py: it costs no held-out "
        "WikiQA page (0.4 costs 1.1 points) and leaves out questions no document bears on.",
    )
    rag_score_margin: float | None = Field(
        0.1,
        ge=0.0,
        le=2.0,
        description="Relative floor: a chunk must also be within this cosine of the best "
        "chunk's; unset: the absolute floor only. 0.1 on bench/retrieval.py: held-out WikiQA "
        "keeps its page for 99.2% of questions (as top-k 4) with 1.18 pages per prompt "
        "instead of 2.57, and 0.05 would leave little room for answers that span chunks.",
    )
    rag_on_empty: Literal["answer", "error"] = Field(
        "answer",
        description="When no chunk passes the floor: answer without context (marked "
        "X-Deja-Retrieval: empty, never cached) or refuse with a 422 no_relevant_context.",
    )
    rag_system_prompt: str = Field(
        "Answer the question using only the context below. If the context does not contain "
        "the answer, say that you do not know. Cite the documents you used by their ids.",
        description="The static system prompt every RAG request starts with (before the "
        "context block), so the replicas' prefix cache sees one prefix per document set.",
    )
    rag_context_order: Literal["document", "score"] = Field(
        "document",
        description="Order of the chunks in the context block: document id and chunk index "
        "(one prompt prefix per document set, which the replicas' prefix cache reuses) or "
        "score (what most RAG apps do; for comparison).",
    )
    rag_default_corpus: str | None = Field(
        None,
        description="Corpus of requests that name none (after X-Deja-Corpus, the tenant's "
        "`corpus` and rag_model_corpus).",
    )
    rag_model_corpus: dict[str, str] = Field(
        default_factory=dict,
        description='Per-model default corpus, e.g. {"my-model": "handbook"} (JSON in '
        "the environment).",
    )
    rag_invalidate_near: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Also invalidate cached questions whose cosine to a chunk of a new, "
        "changed or removed document is at least this (answers the new text may contradict, "
        "or the removed text bore on, whatever they were built from); unset: provenance only. "
        "Preview with a dry-run ingest.",
    )
    rag_on_failure: Literal["answer", "error"] = Field(
        "error",
        description="When retrieval fails: answer without context (marked X-Deja-Retrieval: "
        "failed, never cached) or refuse with a 503. A tenant's keys-file entry overrides it.",
    )

    @field_validator("corpus_preload", mode="before")
    @classmethod
    def _split_preload(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        corpora: dict[str, list[str]] = {}
        for spec in filter(None, (part.strip() for part in value.split(";"))):
            name, sep, paths = spec.partition("=")
            if not sep or not name.strip():
                raise ValueError(f"corpus_preload entry {spec!r} is not name=path[,path…]")
            corpora[name.strip()] = [p.strip() for p in paths.split(",") if p.strip()]
        return corpora

    @model_validator(mode="after")
    def _check_overlap(self) -> Self:
        if self.corpus_chunk_overlap * 2 > self.corpus_chunk_tokens:
            raise ValueError("corpus_chunk_overlap must be at most half of corpus_chunk_tokens")
        return self
