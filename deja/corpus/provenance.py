"""Invalidation by provenance: when a document changes or goes, the answers built from it go.

Every RAG answer records the (corpus, document, version) records it was built from: in its exact
entry (``CachedAnswer.sources``) and, as ``corpus/document`` keys, in its question's vector
payload (``sources``, a keyword index). A change to a document removes exactly the answers that
name it, in both layers; answers built from other documents survive. Both layers are the shared
stores (Redis, the Qdrant server) in a multi-process deployment, so the promise is the same as
the admin API's invalidation.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from deja.cache.entry import CachedAnswer
from deja.cache.exact.base import ExactStore
from deja.corpus.base import DocumentChange
from deja.vectorstore.base import VectorStore


def source_keys(answer: CachedAnswer) -> set[str]:
    """The ``corpus/document`` keys an answer was built from."""
    return {f"{r.get('corpus')}/{r.get('document')}" for r in answer.sources or ()}


async def stale_answers(
    changes: Iterable[DocumentChange],
    exact: ExactStore | None,
    vectors: VectorStore | None,
    *,
    remove: bool = True,
) -> list[str]:
    """The entry ids of the answers built from any changed document, removed from both
    layers unless ``remove`` is False (a dry run: the exact store is only read).

    The vector index finds the answers whose question was indexed; one scan of the exact store
    finds the rest (an answer whose vector could not be written, a gateway without the
    semantic layer). Raises the stores' own errors (``CacheUnavailableError``,
    ``VectorStoreError``): the caller reports them."""
    by_tenant: dict[str, set[str]] = defaultdict(set)
    for change in changes:
        by_tenant[change.tenant].add(change.key())
    if not by_tenant:
        return []
    ids: set[str] = set()
    if vectors is not None and remove:
        for tenant, keys in by_tenant.items():
            ids.update(await vectors.delete_sourced(tenant, sorted(keys)))
    if exact is not None:
        for entry in await exact.scan():
            answer = entry.answer
            changed = by_tenant.get(answer.tenant)
            if changed and source_keys(answer) & changed:
                ids.add(answer.entry_id)
        if remove:
            for entry_id in sorted(ids):
                await exact.delete(entry_id)
    return sorted(ids)
