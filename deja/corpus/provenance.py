"""Invalidation by provenance: when a document changes or goes, the answers built from it go.

Every RAG answer records the (corpus, document, version) records it was built from: in its exact
entry (``CachedAnswer.sources``) and, as ``corpus/document`` keys, in its question's vector
payload (``sources``, a keyword index). A change to a document removes exactly the answers that
name it, in both layers; answers built from other documents survive. Both layers are the shared
stores (Redis, the Qdrant server) in a multi-process deployment, so the promise is the same as
the admin API's invalidation.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable

from deja.cache.entry import source_keys
from deja.cache.exact.base import ExactStore
from deja.corpus.base import DocumentChange
from deja.semantic.index import VectorStore


async def near_questions(
    changes: Iterable[DocumentChange], vectors: VectorStore, near: float, *, limit: int = 100
) -> set[str]:
    """Entry ids of cached questions of the changes' tenants whose cosine to any chunk of the
    new content (a removed document: of its last content) is at least ``near``: answers the
    new text may contradict or the removed text may have borne on, whatever they were built
    from (an added document counts too)."""
    found: set[str] = set()
    now = time.time()
    for change in changes:
        for vector in change.vectors:
            hits = await vectors.neighbours(
                vector, match={"tenant": change.tenant}, now=now, limit=limit
            )
            found.update(h.entry_id for h in hits if h.score >= near)
    return found


async def stale_answers(
    changes: Iterable[DocumentChange],
    exact: ExactStore | None,
    vectors: VectorStore | None,
    *,
    remove: bool = True,
    near: float | None = None,
) -> list[str]:
    """The entry ids of the answers built from any changed document — and with ``near``, of
    the questions within that cosine of its new content — removed from both layers unless
    ``remove`` is False (a dry run: the stores are only read).

    The vector index finds the answers whose question was indexed; one scan of the exact store
    finds the rest (an answer whose vector could not be written, a gateway without the
    semantic layer). Raises the stores' own errors (``CacheUnavailableError``,
    ``VectorStoreError``): the caller reports them."""
    changes = list(changes)
    by_tenant: dict[str, set[str]] = defaultdict(set)
    for change in changes:
        if change.old_version is not None:  # an added document was no answer's source
            by_tenant[change.tenant].add(change.key())
    ids: set[str] = set()
    if near is not None and vectors is not None:
        ids |= await near_questions(changes, vectors, near)
    if vectors is not None and remove:
        for tenant, keys in by_tenant.items():
            ids.update(await vectors.delete_sourced(tenant, sorted(keys)))
    if exact is not None and by_tenant:
        for entry in await exact.scan():
            answer = entry.answer
            changed = by_tenant.get(answer.tenant)
            if changed and set(source_keys(answer.sources)) & changed:
                ids.add(answer.entry_id)
    if remove and ids:
        if vectors is not None:
            await vectors.delete(sorted(ids))  # the near ones (the sourced ones are gone)
        if exact is not None:
            for entry_id in sorted(ids):
                await exact.delete(entry_id)
    return sorted(ids)
