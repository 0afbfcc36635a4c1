"""Cache entries as the API removes them, for the admin routes and application feedback alike.

Removal is a promise: once it returns, no process serves the entry. Answers live only in the
exact store (Redis in a multi-process deployment; its in-process tier is kept coherent by
Redis's invalidation messages, see ``deja.cache.exact.tracking``); a semantic hit must read its
answer from there, so deleting the exact entry ends both kinds of hit at once. An entry goes
with its aliases, and an alias alone (``deja.cache.exact.aliases``: an alias whose entry is gone
serves nothing, in any process). The vectors of all of them are deleted too, for tidiness.
"""

from __future__ import annotations

import contextlib

from app.gateway import Gateway
from deja.cache.exact.aliases import AliasedStore
from deja.errors import InvalidRequestError
from deja.semantic.cache import SEMANTIC_ERRORS

__all__ = ["exact_store", "remove_entries"]


def exact_store(gateway: Gateway) -> AliasedStore:
    """The gateway's exact store; a 400 when the cache is off."""
    if gateway.exact is None:
        raise InvalidRequestError("the cache is disabled on this gateway")
    return gateway.exact


async def remove_entries(gateway: Gateway, ids: list[str]) -> int:
    """Remove ``ids`` (and the aliases of each) from both layers; how many of ``ids`` the
    exact store held. A failing exact store raises ``CacheUnavailableError`` (503); a failing
    vector store is ignored (an orphan vector can no longer be served: its answer is gone)."""
    exact = exact_store(gateway)
    removed = 0
    keys: list[str] = []
    for entry_id in ids:
        gone = await exact.remove(entry_id)
        removed += bool(gone)
        keys += gone
    semantic = gateway.semantic
    if semantic is not None and ids:
        with contextlib.suppress(*SEMANTIC_ERRORS):
            await semantic.store.delete(sorted({*ids, *keys}))
    return removed
