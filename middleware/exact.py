"""Step 3 of the request path: the exact layer, keyed by the canonical request."""

from __future__ import annotations

import time

from deja.cache.exact.base import ExactStore
from deja.errors import CacheUnavailableError
from deja.observability.metrics import Metrics
from deja.request import GatewayRequest, Outcome
from middleware.lookup import Lookup


async def exact_lookup(
    store: ExactStore | None, req: GatewayRequest, entry_id: str | None, metrics: Metrics
) -> Lookup:
    """An exact hit, or a miss that carries the entry id its answer will be stored under.
    ``entry_id`` is the request's exact key (``cache_key``), computed or memoised by the
    caller; it is None exactly when the request is not cacheable."""
    if store is None or not req.cache:
        return Lookup(Outcome.OFF, None)
    if entry_id is None:
        return Lookup(Outcome.MISS, None)
    if not req.policy.read:
        return Lookup(Outcome.MISS, entry_id)
    started = time.perf_counter()
    try:
        answer = await store.get(entry_id)
    except CacheUnavailableError:
        metrics.count(metrics.store_errors, "exact")
        return Lookup(Outcome.OFF, entry_id)
    metrics.lookup("exact", time.perf_counter() - started)
    if answer is None or answer.older_than(req.policy.max_age):
        return Lookup(Outcome.MISS, entry_id)
    return Lookup(Outcome.EXACT, entry_id, answer)
