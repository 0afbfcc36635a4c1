"""Invalidation by provenance over real stores: the in-process exact store and a Qdrant Edge
shard. A changed document removes exactly the answers built from it, in both layers."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from deja.cache.entry import CachedAnswer
from deja.cache.exact.memory import MemoryExactStore
from deja.corpus.base import DocumentChange
from deja.corpus.provenance import stale_answers
from deja.semantic.index import QUESTION_INDEXES, Scope, VectorPoint, VectorStore
from deja.vectors.edge import EdgeCollection

pytestmark = pytest.mark.integration

SCOPE = Scope(tenant="acme", model="m", params_hash="p", context_hash="c")


def answer(tenant: str, sources: list[tuple[str, str, int]] | None) -> CachedAnswer:
    records = None
    if sources is not None:
        records = [{"corpus": c, "document": d, "version": v} for c, d, v in sources]
    return CachedAnswer(
        entry_id=uuid.uuid4().hex * 2,
        endpoint="chat",
        model="m",
        finish_reason="stop",
        created_at=time.time(),
        message={"role": "assistant", "content": "x"},
        tenant=tenant,
        sources=records,
    )


async def test_a_changed_document_removes_exactly_its_answers(tmp_path: Path) -> None:
    exact = MemoryExactStore(max_entries=100, max_bytes=1 << 20)
    vectors = VectorStore(
        EdgeCollection(tmp_path, collection="prov_4", dim=4, indexes=QUESTION_INDEXES)
    )
    await vectors.open()
    try:
        stored = {
            "a": answer("acme", [("docs", "a.md", 1)]),
            "ab": answer("acme", [("docs", "a.md", 1), ("docs", "b.md", 2)]),
            "b": answer("acme", [("docs", "b.md", 2)]),
            "other_corpus": answer("acme", [("wiki", "a.md", 1)]),
            "plain": answer("acme", None),
            "other_tenant": answer("globex", [("docs", "a.md", 1)]),
        }
        for item in stored.values():
            await exact.set(item.entry_id, item, 3600)
            keys = [f"{r['corpus']}/{r['document']}" for r in item.sources or ()]
            scope = Scope(item.tenant, "m", "p", "c")
            point = VectorPoint(
                item.entry_id,
                [1.0, 0, 0, 0],
                scope,
                "q",
                item.created_at,
                item.created_at + 99,
                {"sources": keys} if keys else {},
            )
            await vectors.upsert([point])
        # one exact-only answer (its vector was never written)
        lone = answer("acme", [("docs", "a.md", 1)])
        await exact.set(lone.entry_id, lone, 3600)

        change = DocumentChange("acme", "docs", "a.md", old_version=1, new_version=2)
        preview = await stale_answers([change], exact, vectors, remove=False)
        expected = sorted([stored["a"].entry_id, stored["ab"].entry_id, lone.entry_id])
        assert preview == expected
        assert await exact.count() == len(stored) + 1  # a dry run removes nothing

        removed = await stale_answers([change], exact, vectors)
        assert removed == expected
        for name in ("a", "ab"):
            assert await exact.get(stored[name].entry_id) is None
        for name in ("b", "other_corpus", "plain", "other_tenant"):
            assert await exact.get(stored[name].entry_id) is not None
        hits = await vectors.search([1.0, 0, 0, 0], SCOPE, now=time.time(), limit=10)
        assert {h.entry_id for h in hits} == {
            stored[n].entry_id for n in ("b", "other_corpus", "plain")
        }
    finally:
        await vectors.close()
