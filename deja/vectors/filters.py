"""The one filter builder of the vector layer: backend-neutral conditions that each backend
translates in one function (``deja.vectors.edge.edge_filter``,
``deja.vectors.qdrant.qdrant_filter``). Only what the schemas need: equality, any-of and
numeric ranges, all of which must hold."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Match:
    """``key`` equals ``value`` (a keyword, or an integer field)."""

    key: str
    value: str | int


@dataclass(frozen=True, slots=True)
class MatchAny:
    """``key`` (a keyword, or a list of keywords) holds any of ``values``."""

    key: str
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Range:
    """``key`` within the given bounds (each one optional)."""

    key: str
    gt: float | None = None
    gte: float | None = None
    lt: float | None = None
    lte: float | None = None


Condition = Match | MatchAny | Range


@dataclass(frozen=True, slots=True)
class Filter:
    """Every condition must hold."""

    must: tuple[Condition, ...] = ()


def all_of(*conditions: Condition | None) -> Filter | None:
    """The conditions given (``None`` ones left out) as one filter; ``None`` when none is left,
    which selects every point."""
    kept = tuple(c for c in conditions if c is not None)
    return Filter(kept) if kept else None


def matches(fields: Mapping[str, str | int]) -> tuple[Condition, ...]:
    """One ``Match`` per ``field: value``."""
    return tuple(Match(key, value) for key, value in fields.items())
