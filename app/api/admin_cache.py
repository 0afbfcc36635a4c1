"""Admin: cache statistics, browsing, invalidation, feedback, flushing, and live θ.

Invalidation is a promise: once a call returns, no process serves the removed entries
(:mod:`app.api.entries`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from app.api.admin import Admin, audit
from app.api.entries import exact_store, remove_entries
from app.api.feedback import Verdict, apply_feedback
from app.api.json import json_response
from app.gateway import Gateway
from deja.cache.entry import CachedAnswer
from deja.cache.exact.base import StoredEntry
from deja.cache.keys import ENTRY_ID
from deja.errors import (
    CacheUnavailableError,
    InvalidRequestError,
    NotFoundError,
    VectorStoreError,
    describe,
)
from deja.semantic.cache import SEMANTIC_ERRORS
from deja.semantic.index import ALIAS_FIELD

router = APIRouter(prefix="/admin")


#: How many nearest questions a similarity query considers.
QUERY_CANDIDATES = 1000
#: How many matching entries a dry-run invalidation describes.
DRY_RUN_ROWS = 100


async def _entries(gateway: Gateway, *, aliases: bool = False) -> list[StoredEntry]:
    """Every entry (an alias goes with its entry: listed, invalidated and flushed with it);
    with ``aliases``, the alias records too. A failing store raises CacheUnavailableError: a
    503, never the admin's fault."""
    found = await exact_store(gateway).scan()
    return found if aliases else [e for e in found if e.answer.alias_of is None]


async def _similar(gateway: Gateway, query: str, match: dict[str, str]) -> dict[str, float]:
    """Entry id → similarity of its question to ``query`` (nearest ``QUERY_CANDIDATES``)."""
    semantic = gateway.semantic
    if semantic is None:
        raise InvalidRequestError("query needs the semantic layer, which is off", param="q")
    try:
        vector = await semantic.embedder.embed(query)
        points = await semantic.store.neighbours(
            vector, match=match, now=time.time(), limit=QUERY_CANDIDATES
        )
    except SEMANTIC_ERRORS as exc:  # a dependency failed: 503, not the admin's fault
        raise VectorStoreError(f"the semantic layer failed: {describe(exc)}") from exc
    scores: dict[str, float] = {}
    for p in points:  # an alias's vector finds its entry
        entry_id = str(p.payload.get(ALIAS_FIELD) or p.entry_id)
        scores[entry_id] = max(p.score, scores.get(entry_id, -1.0))
    return scores


def _describe(entry: StoredEntry, similarity: float | None = None) -> dict[str, Any]:
    a = entry.answer
    return {
        "id": a.entry_id,
        "tenant": a.tenant,
        "namespace": a.namespace,
        "model": a.model,
        "endpoint": a.endpoint,
        "question": a.question,
        "created_at": a.created_at,
        "expires_at": a.expires_at,
        "hits": entry.hits,
        "similarity": None if similarity is None else round(similarity, 4),
        "alias_of": a.alias_of,
        "alias_count": len(a.aliases or ()),
    }


@router.get("/cache/stats")
async def cache_stats(gateway: Admin) -> Response:
    """Entries per layer, outcomes since start, and per-tenant figures."""
    exact_entries: int | None
    try:
        exact_entries = await exact_store(gateway).count() if gateway.exact is not None else 0
    except CacheUnavailableError:
        exact_entries = None
    semantic = gateway.semantic
    semantic_entries: int | None = None
    if semantic is not None:
        try:
            semantic_entries = await semantic.store.count()
        except SEMANTIC_ERRORS:
            semantic_entries = None
    stats = gateway.pipeline.stats
    return json_response(
        {
            "layers": {
                "exact": {
                    "backend": gateway.exact.name if gateway.exact is not None else None,
                    "entries": exact_entries,
                },
                "semantic": {
                    "backend": semantic.store.name if semantic is not None else None,
                    "entries": semantic_entries,
                },
            },
            "since_start": stats.totals(),
            "tenants": stats.tenants(),
            "live_precision": _live_precision(gateway),
        }
    )


def _live_precision(gateway: Gateway) -> dict[str, Any] | None:
    """Estimated live precision of semantic hits, from the shadow checks (None: off)."""
    step = gateway.semantic_step
    if step is None or step.checks.shadow is None:
        return None
    return step.checks.shadow.stats()


@router.get("/cache/entries")
async def list_entries(
    gateway: Admin,
    tenant: str | None = None,
    q: str | None = None,
    limit: int = Query(50, ge=1, le=1000),
) -> Response:
    """Browse entries, newest first; with ``q``, ranked by similarity to it (through their
    aliases' questions too). Aliases are listed with their entry (``GET .../{id}``)."""
    entries = [e for e in await _entries(gateway) if tenant is None or e.answer.tenant == tenant]
    if q:
        scores = await _similar(gateway, q, {"tenant": tenant} if tenant else {})
        ranked = sorted(
            (e for e in entries if e.answer.entry_id in scores),
            key=lambda e: -scores[e.answer.entry_id],
        )
        rows = [_describe(e, scores[e.answer.entry_id]) for e in ranked[:limit]]
    else:
        entries.sort(key=lambda e: -e.answer.created_at)
        rows = [_describe(e) for e in entries[:limit]]
    return json_response({"entries": rows})


@router.get("/cache/entries/{entry_id}")
async def get_entry(entry_id: str, gateway: Admin) -> Response:
    """One entry: the stored answer with its hits, age and remaining TTL, and its aliases
    (the questions promoted onto it, each with its own hits); an alias's id gives the alias
    record, whose ``alias_of`` names the entry. An admin-time scan, like the listing: the hit
    count lives beside the answer."""
    if not ENTRY_ID.fullmatch(entry_id):
        raise NotFoundError(f"no cache entry {entry_id}")
    entries = await _entries(gateway, aliases=True)
    found = [e for e in entries if e.answer.entry_id == entry_id]
    if not found:
        raise NotFoundError(f"no cache entry {entry_id}")
    entry, now = found[0], time.time()
    answer = entry.answer
    aliases = sorted(
        (e for e in entries if e.answer.alias_of == entry_id and answer.alias_of is None),
        key=lambda e: e.answer.entry_id,
    )
    return json_response(
        {
            **_describe(entry),
            "aliases": [_describe(e) for e in aliases],
            **_evidence(gateway, answer),
            "age_seconds": round(answer.age(now), 3),
            "ttl_seconds": round(max(0.0, answer.expires_at - now), 3)
            if answer.expires_at
            else None,
            "answer": dataclasses.asdict(answer),
        }
    )


def _evidence(gateway: Gateway, answer: CachedAnswer) -> dict[str, Any]:
    """What the learning loop knows of the entry: its verdicts (an alias's are its entry's)
    and the cut-off they earn at the entry's tenant's target."""
    learning = gateway.learning
    if learning is None:
        return {"evidence": [], "cutoff": None}
    entry_id = answer.alias_of or answer.entry_id
    found = learning.evidence.of(entry_id)
    target = learning.target(answer.tenant, answer.model)
    cutoff = learning.cutoff(entry_id, learning.table.tau(target), target)
    return {
        "evidence": [v.as_json() for v in found],
        "cutoff": {"target": target, "tau": cutoff} if cutoff != float("inf") else None,
    }


@router.delete("/cache/entries/{entry_id}")
async def delete_entry(entry_id: str, gateway: Admin) -> Response:
    """One entry, from both layers."""
    if not ENTRY_ID.fullmatch(entry_id) or await remove_entries(gateway, [entry_id]) == 0:
        raise NotFoundError(f"no cache entry {entry_id}")
    audit(gateway, "cache.delete", count=1, ids=[entry_id])
    return json_response({"id": entry_id, "deleted": True})


class AdminFeedback(BaseModel):
    """An admin's verdict on an entry of any tenant (``POST /v1/feedback`` is the app's)."""

    model_config = ConfigDict(extra="forbid")

    verdict: Verdict
    note: str | None = Field(None, max_length=500)


@router.post("/cache/entries/{entry_id}/feedback")
async def entry_feedback(entry_id: str, spec: AdminFeedback, gateway: Admin) -> Response:
    """Say whether an entry's answer is right; ``wrong`` removes it from both layers."""
    result = await apply_feedback(
        gateway, entry_id, spec.verdict, tenant=None, source="admin", who=None, note=spec.note
    )
    return json_response({"object": "deja.feedback", **result})


class Invalidate(BaseModel):
    """Which entries to remove: every given condition must hold."""

    tenant: str | None = None
    model: str | None = None
    namespace: str | None = None
    older_than: float | None = Field(None, ge=0, description="Seconds since the entry was made.")
    query: str | None = Field(None, description="Entries whose question is similar to this.")
    min_similarity: float | None = Field(
        None, ge=0, le=1, description="Default: the global θ (the candidates' cosine floor)."
    )
    dry_run: bool = False


def _matches(answer: CachedAnswer, spec: Invalidate, now: float) -> bool:
    return (
        (spec.tenant is None or answer.tenant == spec.tenant)
        and (spec.model is None or answer.model == spec.model)
        and (spec.namespace is None or answer.namespace == spec.namespace)
        and (spec.older_than is None or now - answer.created_at >= spec.older_than)
    )


@router.post("/cache/invalidate")
async def invalidate(spec: Invalidate, gateway: Admin) -> Response:
    """Remove the entries matching every given condition from both layers."""
    fields = spec.model_dump(exclude={"dry_run", "min_similarity"}, exclude_none=True)
    if not fields:
        raise InvalidRequestError("give at least one condition (or use /admin/cache/flush)")
    now = time.time()
    matching = {
        e.answer.entry_id: e for e in await _entries(gateway) if _matches(e.answer, spec, now)
    }
    ids = set(matching)
    if spec.query:
        match = {k: v for k in ("tenant", "model", "namespace") if (v := getattr(spec, k))}
        floor = spec.min_similarity
        if floor is None:
            floor = gateway.thresholds.global_
        scores = await _similar(gateway, spec.query, match)
        ids &= {entry_id for entry_id, score in scores.items() if score >= floor}
    chosen = sorted(ids)
    count = len(chosen) if spec.dry_run else await remove_entries(gateway, chosen)
    audit(gateway, "cache.invalidate", count=count, dry_run=spec.dry_run, where=fields)
    result: dict[str, Any] = {"count": count, "ids": chosen, "dry_run": spec.dry_run}
    if spec.dry_run:  # what would go, for a human to check (the newest first)
        rows = sorted((matching[i] for i in chosen), key=lambda e: -e.answer.created_at)
        result["entries"] = [_describe(e) for e in rows[:DRY_RUN_ROWS]]
    return json_response(result)


class Flush(BaseModel):
    tenant: str | None = None


@router.post("/cache/flush")
async def flush(gateway: Admin, spec: Flush | None = None) -> Response:
    """Everything, or one tenant."""
    tenant = spec.tenant if spec else None
    ids = [
        e.answer.entry_id
        for e in await _entries(gateway)
        if tenant is None or e.answer.tenant == tenant
    ]
    count = await remove_entries(gateway, ids)
    audit(gateway, "cache.flush", count=count, tenant=tenant)
    return json_response({"count": count})


@router.get("/threshold")
async def get_threshold(gateway: Admin) -> Response:
    """The global θ and the per-tenant and per-model overrides."""
    return json_response(gateway.thresholds.as_json())


@router.put("/threshold")
async def put_threshold(change: dict[str, Any], gateway: Admin) -> Response:
    """Change θ: ``{"global": v}``, ``{"tenants": {t: v}}``, ``{"models": {m: v}}``, and the
    precision target the same way under ``{"precision": {...}}``; a null value removes an
    override. Persisted in the shared store for every process."""
    unknown = set(change) - {"global", "tenants", "models", "precision"}
    if unknown:
        raise InvalidRequestError(f"unknown fields: {sorted(unknown)}")
    gateway.thresholds.apply(change)
    # A failing store is a ThresholdStoreError: 503, never the client's fault.
    await gateway.threshold_store.save(gateway.thresholds.as_json())
    audit(gateway, "threshold.set", change=change)
    return json_response(gateway.thresholds.as_json())
