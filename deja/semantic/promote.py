"""Promotion: a paraphrase the judge approved becomes an alias of the entry it matched.

The first time a question lands in the grey zone of a cached entry (decision score between the
judge's floor and the request's cut-off) and the judge says "same", the question is added to
the entry (Krites' promotion, issue 24): its exact key becomes an alias record
(:meth:`AliasedStore.promote`) and its vector a point of its own that names the alias. From then
on the same question is an exact hit, and its neighbours find the entry through either vector.

In async mode the grey-zone request was served as a miss, so the model has just answered the
question itself: that answer is a second opinion for free. The promotion waits (up to
``answer_wait`` seconds, in the background) for it to be stored and promotes only when it agrees
with the entry's (the shadow checks' rule: answer-embedding cosine ≥ 0.90); a judge's "same"
over answers that disagree is counted (``disagreed``) and becomes evidence against the entry at
that score. Sync mode served the entry's answer, so there is no second opinion: the judge alone
decides there.

Nothing here runs on a request's time: the semantic step hands a promotion to the background
task set. A failing store means one promotion less (counted), never an error for anyone; an
exact alias whose vector could not be written still serves exact hits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Literal

from deja.cache.exact.aliases import AliasedStore
from deja.errors import CacheUnavailableError
from deja.observability.metrics import Metrics
from deja.semantic.cache import SEMANTIC_ERRORS, SemanticCache
from deja.semantic.scope import SemanticQuery
from deja.semantic.shadow import answers_agree, cached_text

log = logging.getLogger("deja.semantic")

__all__ = ["ANSWER_WAIT_SECONDS", "Outcome", "Promoter"]


#: How long an async promotion waits for the question's own answer to be stored.
ANSWER_WAIT_SECONDS = 30.0

Outcome = Literal["promoted", "exact_only", "skipped", "disagreed", "failed"]


class Promoter:
    """Writes aliases into both layers; ``deja_promotions_total{outcome}`` counts the tries."""

    def __init__(
        self,
        exact: AliasedStore,
        cache: SemanticCache,
        metrics: Metrics,
        *,
        agree_cosine: float = 0.90,
        answer_wait: float = ANSWER_WAIT_SECONDS,
    ) -> None:
        self.exact = exact
        self.cache = cache
        self.metrics = metrics
        self.agree_cosine = agree_cosine
        self.answer_wait = answer_wait

    async def promote(
        self,
        query: SemanticQuery,
        key: str,
        vector: list[float] | None,
        entry_id: str,
        *,
        confirm: bool = False,
    ) -> Outcome:
        """Make ``query`` (exact key ``key``, its vector if the lookup made one) an alias of
        ``entry_id``; with ``confirm``, only if the answer stored under ``key`` meanwhile agrees
        with the entry's. The outcome, also counted."""
        outcome = await self.attempt(query, key, vector, entry_id, confirm)
        self.metrics.count(self.metrics.promotions, outcome)
        return outcome

    async def attempt(
        self,
        query: SemanticQuery,
        key: str,
        vector: list[float] | None,
        entry_id: str,
        confirm: bool,
    ) -> Outcome:
        try:
            if confirm:
                agreed = await self.answers_agree(key, entry_id)
                if agreed is not True:
                    return "skipped" if agreed is None else "disagreed"
            entry = await self.exact.promote(entry_id, key, query.text)
        except (CacheUnavailableError, *SEMANTIC_ERRORS):
            return "failed"
        if entry is None:  # gone, an alias, too many aliases, about to expire
            return "skipped"
        try:
            await self.cache.add_alias(query, key=key, vector=vector, entry=entry)
        except SEMANTIC_ERRORS as exc:
            log.warning("alias %s of %s: its vector was not written: %s", key, entry_id, exc)
            return "exact_only"
        return "promoted"

    async def answers_agree(self, key: str, entry_id: str) -> bool | None:
        """Whether the answer stored under ``key`` (waited for, with backoff, up to
        ``answer_wait``) agrees with the entry's; None: nothing to compare (never stored,
        already an alias, the entry gone)."""
        deadline = time.monotonic() + self.answer_wait
        pause = 0.05
        while (own := await self.exact.record(key)) is None:
            if time.monotonic() + pause > deadline:
                return None
            await asyncio.sleep(pause)
            pause = min(1.0, pause * 2)
        entry = await self.exact.record(entry_id)
        if own.alias_of is not None or entry is None:
            return None
        embedder = self.cache.embedder
        return await answers_agree(
            embedder, cached_text(entry), cached_text(own), self.agree_cosine
        )
