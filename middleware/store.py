"""Step 7 of the request path: a complete, cacheable answer is stored, off the response path,
in the exact layer and then (its question) in the semantic layer."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import orjson

from deja.cache.entry import CachedAnswer
from deja.cache.exact.base import ExactStore
from deja.errors import CacheUnavailableError
from deja.observability.metrics import Metrics
from deja.request import GatewayRequest
from deja.semantic.cache import SEMANTIC_ERRORS
from deja.semantic.scope import question_text
from middleware.lookup import Lookup
from middleware.semantic import SemanticStep

log = logging.getLogger("deja.pipeline")

Build = Callable[[], CachedAnswer | None]


async def store_answer(
    exact: ExactStore,
    semantic: SemanticStep | None,
    metrics: Metrics,
    req: GatewayRequest,
    lookup: Lookup,
    build: Build,
    sources: list[dict[str, Any]] | None = None,
) -> None:
    """Parse the answer (``build``) and write it under the lookup's entry id, with the RAG
    ``sources`` it was built from (the exact entry holds the records, the question's vector
    their ``corpus/document`` keys, which provenance invalidation matches on)."""
    entry_id = lookup.entry_id
    if entry_id is None:
        return
    try:
        built = build()
    except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
        log.warning("not caching an answer that could not be parsed: %s", exc)
        return
    if built is None:
        return
    metrics.tokens(req.model, built.usage or {})  # the replica's answer: the tuning workload
    if semantic is not None:  # a failed lookup: the classifier decides now, or nothing is stored
        settled = await semantic.settle(lookup)
        if settled is None:
            return
        lookup = settled
    ttl = req.policy.ttl
    answer = dataclasses.replace(
        built,
        tenant=req.tenant,
        namespace=req.namespace,
        question=question_text(req) or None,
        expires_at=built.created_at + ttl,
        sources=sources,
    )
    try:
        await exact.set(entry_id, answer, ttl)
    except CacheUnavailableError:
        metrics.count(metrics.store_errors, "exact")
        return  # already logged by the store; the answer was served regardless
    if semantic is None or lookup.query is None:
        return
    try:
        await semantic.cache.add(
            lookup.query,
            entry_id=entry_id,
            vector=lookup.vector,
            created_at=answer.created_at,
            ttl=ttl,
            sources=[f"{r['corpus']}/{r['document']}" for r in sources or ()],
        )
    except SEMANTIC_ERRORS as exc:
        metrics.count(metrics.store_errors, "semantic")
        semantic.failed(exc)
