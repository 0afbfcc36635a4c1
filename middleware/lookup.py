"""What the cache steps (bypass, exact, semantic) hand to the rest of the request path."""

from __future__ import annotations

from dataclasses import dataclass

from deja.cache.entry import CachedAnswer
from deja.request import Outcome
from deja.semantic.scope import SemanticQuery


@dataclass(slots=True)
class Lookup:
    """An answer to replay, or what a miss needs to be stored. Treat it as immutable (derive
    with ``dataclasses.replace``); not ``frozen`` only because a frozen ``__init__`` costs
    ~2 µs more on every request (it sets each field through ``object.__setattr__``).

    ``entry_id`` is this request's cache key, the id its answer is (or would be) stored under in
    every layer; None when the request may not be cached at all.
    """

    outcome: Outcome
    entry_id: str | None
    answer: CachedAnswer | None = None
    bypass: str | None = None
    similarity: float | None = None
    verifier_score: float | None = None
    query: SemanticQuery | None = None
    vector: list[float] | None = None
