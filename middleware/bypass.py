"""Step 2 of the request path: a question whose answer depends on when it is asked skips both
cache layers and is not stored."""

from __future__ import annotations

from deja.request import GatewayRequest
from deja.semantic.scope import question_text
from deja.temporal.rules import TemporalDetector


def bypass_reason(temporal: TemporalDetector | None, req: GatewayRequest) -> str | None:
    """The bypass reason (``temporal``) for a volatile question, else None."""
    if temporal is None:
        return None
    found = temporal.check(question_text(req))
    return found.reason if found is not None else None
