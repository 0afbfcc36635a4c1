"""The decision between "a similar cached question was found" and "its answer is served"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from deja.cache.entry import CachedAnswer
from deja.semantic.scope import SemanticQuery
from deja.vectorstore.base import ScoredPoint


@dataclass(frozen=True, slots=True)
class Candidate:
    """The nearest cached question in scope, before any verification."""

    point: ScoredPoint
    answer: CachedAnswer


class Verifier(Protocol):
    """Decides whether a candidate found by similarity may be served (a later issue)."""

    async def accept(self, query: SemanticQuery, candidate: Candidate) -> bool: ...
