"""Promotion: a paraphrase the judge approved becomes an alias of the entry it matched.

The first time a question lands in the grey zone of a cached entry (decision score between the
judge's floor and the request's cut-off) and the judge says "same", the question is added to
the entry (Krites' promotion, issue 24): its exact key becomes an alias record
(:meth:`AliasedStore.promote`) and its vector a point of its own that names the alias. From then
on the same question is an exact hit, and its neighbours find the entry through either vector.

Nothing here runs on a request's time: the semantic step hands a promotion to the background
task set. A failing store means one promotion less (counted), never an error for anyone; an
exact alias whose vector could not be written still serves exact hits.
"""

from __future__ import annotations

import logging

from deja.cache.exact.aliases import AliasedStore
from deja.errors import CacheUnavailableError
from deja.observability.metrics import Metrics
from deja.semantic.cache import SEMANTIC_ERRORS, SemanticCache
from deja.semantic.scope import SemanticQuery

log = logging.getLogger("deja.semantic")

__all__ = ["Promoter"]


class Promoter:
    """Writes aliases into both layers; ``deja_promotions_total{outcome}`` counts the tries."""

    def __init__(self, exact: AliasedStore, cache: SemanticCache, metrics: Metrics) -> None:
        self.exact = exact
        self.cache = cache
        self.metrics = metrics

    async def promote(
        self, query: SemanticQuery, key: str, vector: list[float] | None, entry_id: str
    ) -> bool:
        """Make ``query`` (exact key ``key``, its vector if the lookup made one) an alias of
        ``entry_id``. True when the alias is in the exact store (its vector too, unless that
        write failed)."""
        try:
            entry = await self.exact.promote(entry_id, key, query.text)
        except CacheUnavailableError:
            self.metrics.count(self.metrics.promotions, "failed")
            return False
        if entry is None:  # gone, an alias, too many aliases, about to expire
            self.metrics.count(self.metrics.promotions, "skipped")
            return False
        try:
            await self.cache.add_alias(query, key=key, vector=vector, entry=entry)
        except SEMANTIC_ERRORS as exc:
            log.warning("alias %s of %s: its vector was not written: %s", key, entry_id, exc)
            self.metrics.count(self.metrics.promotions, "exact_only")
            return True
        self.metrics.count(self.metrics.promotions, "promoted")
        return True
