"""Step 5 of the request path: retrieval, for RAG requests that missed both cache layers.

The cache sits ahead of the retriever: a hit never gets here. On a miss, the question (the last
user message) is embedded — or its vector reused from the semantic lookup — and the top-k chunks
of the tenant's corpus become the context block of the prompt sent upstream
(``deja.corpus.prompt``). The answer is stored with the (document, version) pairs it was built
from, so a change to one of those documents removes it.

A failed or slow retrieval never passes silently: the tenant's ``rag_on_failure`` either refuses
the request (503) or answers without context, marked ``X-Deja-Retrieval: failed`` and not stored.
Neither does a question no chunk is relevant to (none passed the relevance floor,
``deja.corpus.relevance``): ``rag_on_empty`` refuses it (422 ``no_relevant_context``) or
answers it without context, marked ``X-Deja-Retrieval: empty`` and not stored (a document added
later may answer it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

import orjson

from deja.corpus.base import SourceRef, sources_of
from deja.corpus.prompt import ContextOrder, with_context
from deja.corpus.service import Corpora
from deja.errors import (
    CorpusNotFoundError,
    EmbedderError,
    NoRelevantContextError,
    RetrievalError,
    describe,
)
from deja.observability.metrics import Metrics
from deja.request import GatewayRequest
from deja.semantic.scope import message_text

log = logging.getLogger("deja.pipeline")

Embed = Callable[[str], Awaitable[list[float]]]


@dataclass(frozen=True, slots=True)
class RetrievalPolicy:
    """How retrieval runs, from the ``rag_*`` settings (``config.rag.RagSettings``)."""

    system_prompt: str
    top_k: int = 4
    timeout: float = 1.0
    order: ContextOrder = "document"
    #: No chunk passed the floor: ``answer`` without context (marked) or ``error`` (422).
    on_empty: Literal["answer", "error"] = "answer"


@dataclass(frozen=True, slots=True)
class Retrieval:
    """What goes upstream for a RAG request, and what it was built from."""

    req: GatewayRequest
    sources: tuple[SourceRef, ...] = ()
    #: Retrieval failed and the tenant allows answering without context: do not store.
    failed: bool = False
    #: No chunk passed the relevance floor; answered without context: do not store.
    empty: bool = False

    @property
    def storable(self) -> bool:
        """Whether the answer may be cached: only one built from a retrieval that worked."""
        return not (self.failed or self.empty)

    @property
    def outcome(self) -> str | None:
        """``X-Deja-Retrieval``: ``failed``, ``empty``, or None (retrieved, or no RAG)."""
        return "failed" if self.failed else "empty" if self.empty else None

    @property
    def records(self) -> list[dict[str, Any]] | None:
        """The sources as an answer stores them (None: not a RAG request)."""
        return source_records(self.sources) if self.req.corpus is not None else None


def source_records(sources: tuple[SourceRef, ...]) -> list[dict[str, Any]]:
    """Sources as stored with an answer and sent in the ``deja_sources`` response field."""
    return [{"corpus": s.corpus, "document": s.document, "version": s.version} for s in sources]


def sources_header(records: list[dict[str, Any]]) -> str:
    """``X-Deja-Sources``: ``document@version`` per source, comma-separated, each document id
    percent-encoded (header values are Latin-1 and ids may hold commas or any character)."""
    return ", ".join(f"{quote(str(r['document']), safe='/._-~')}@{r['version']}" for r in records)


def retrieval_query(req: GatewayRequest) -> str:
    """The text retrieval searches with: the last user message of the conversation."""
    for message in reversed(req.body["messages"]):
        if message.get("role") == "user":
            return message_text(message).strip()
    return ""


class RetrieveStep:
    """Checks that a request's corpus exists, and retrieves its context on a miss."""

    def __init__(
        self, retriever: Corpora, embed: Embed, settings: RetrievalPolicy, metrics: Metrics
    ) -> None:
        self.retriever = retriever
        self.embed = embed
        self.settings = settings
        self.metrics = metrics

    def check(self, req: GatewayRequest) -> None:
        """404 for a corpus the tenant does not own — another tenant's included, so its
        existence does not leak."""
        if req.corpus is not None and not self.retriever.has_corpus(req.tenant, req.corpus):
            raise CorpusNotFoundError(
                f"The corpus '{req.corpus}' does not exist.", param="X-Deja-Corpus"
            )

    async def retrieve(self, req: GatewayRequest, vector: list[float] | None) -> Retrieval:
        """The request with its context block, or the failure policy's answer. ``vector`` is
        the question's embedding from the semantic lookup, when it ran on the same text."""
        assert req.corpus is not None
        query = retrieval_query(req)
        if not query:  # nothing to search with: the conversation goes as it is
            return Retrieval(req)
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.settings.timeout):
                if vector is None:
                    vector = await self.embed(query)
                chunks = await self.retriever.retrieve(
                    req.tenant,
                    req.corpus,
                    vector,
                    limit=self.settings.top_k,
                    where=dict(req.corpus_filter) or None,
                    query=query,
                )
        except (RetrievalError, EmbedderError, TimeoutError) as exc:
            return self._failed(req, exc)
        self.metrics.retrieval_seconds.observe(time.perf_counter() - started)
        if not chunks and self.settings.on_empty == "error":
            self.metrics.count(self.metrics.retrievals, "empty_refused")
            raise NoRelevantContextError(
                f"No document of the corpus '{req.corpus}' is relevant to this question."
            )
        self.metrics.count(self.metrics.retrievals, "ok" if chunks else "empty_answered")
        body = with_context(req.body, chunks, self.settings.system_prompt, self.settings.order)
        upstream = dataclasses.replace(req, body=body, raw=orjson.dumps(body))
        return Retrieval(upstream, tuple(sources_of(chunks)), empty=not chunks)

    def _failed(self, req: GatewayRequest, exc: BaseException) -> Retrieval:
        reason = describe(exc)
        if req.rag_on_failure == "error":
            self.metrics.count(self.metrics.retrievals, "failed_refused")
            log.warning("retrieval from corpus %r failed, refusing: %s", req.corpus, reason)
            raise RetrievalError(
                f"Retrieval from the corpus '{req.corpus}' is unavailable; try again later."
            ) from exc
        self.metrics.count(self.metrics.retrievals, "failed_answered")
        log.warning("retrieval from corpus %r failed, answering without it: %s", req.corpus, reason)
        return Retrieval(req, failed=True)
