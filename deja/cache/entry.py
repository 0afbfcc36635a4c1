"""The cached answer: one normalised record, whatever shape (JSON or SSE) first produced it."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from deja.cache.keys import Endpoint

#: Finish reasons of a normal, complete answer. Anything else (content_filter, error, abort,
#: a missing reason) is never stored.
NORMAL_FINISH: frozenset[str] = frozenset({"stop", "length", "tool_calls", "function_call"})


@dataclass(frozen=True, slots=True)
class CachedAnswer:
    """One stored answer.

    ``message`` is the assistant message for chat (role, content, tool_calls, …) and ``text``
    the completion text for ``/v1/completions``. ``usage`` is the usage of the request that
    produced the answer; a replay reports it unchanged (see docs/architecture.md).
    """

    entry_id: str
    endpoint: Endpoint
    model: str
    finish_reason: str
    created_at: float
    message: dict[str, Any] | None = None
    text: str | None = None
    usage: dict[str, Any] | None = None
    system_fingerprint: str | None = None
    # Where the entry belongs and what it answered (admin listing and invalidation).
    tenant: str = "default"
    namespace: str = ""
    question: str | None = None
    expires_at: float = 0.0
    #: RAG provenance: the documents the answer was built from, as
    #: ``{"corpus", "document", "version"}`` records; None for a plain answer.
    sources: list[dict[str, Any]] | None = None
    #: ``/v1/embeddings``: the replica's ``data`` list (the vectors, in the encoding the
    #: request asked for, which is part of the key); None for a generation answer.
    data: list[Any] | None = None
    #: On an alias (``deja.cache.exact.aliases``): the entry id whose answer this question is
    #: served; the record holds no answer of its own. On an alias resolved for serving: the
    #: entry it stands for (``entry_id`` is then the alias's own key).
    alias_of: str | None = None
    #: On an entry: the keys of its aliases, oldest first (for removal and listing).
    aliases: list[str] | None = None

    def to_bytes(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_bytes(cls, raw: bytes) -> CachedAnswer:
        return cls(**orjson.loads(raw))

    def age(self, now: float) -> float:
        return max(0.0, now - self.created_at)

    def older_than(self, max_age: float | None) -> bool:
        """True when a ``Cache-Control: max-age`` rules this answer out."""
        return max_age is not None and self.age(time.time()) > max_age


def source_keys(sources: list[dict[str, Any]] | None) -> list[str]:
    """The ``corpus/document`` keys of a RAG answer's sources (``CachedAnswer.sources``), in
    order: what the vector payload indexes and provenance invalidation matches."""
    return [f"{r.get('corpus')}/{r.get('document')}" for r in sources or ()]


def answer_from_json(
    body: dict[str, Any], *, entry_id: str, endpoint: Endpoint, created_at: float
) -> CachedAnswer | None:
    """Build a cacheable answer from a replica's non-streamed response, or None if not cacheable."""
    choices = body.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return None
    choice = choices[0]
    finish = choice.get("finish_reason")
    if finish not in NORMAL_FINISH:
        return None
    model = body.get("model")
    usage = body.get("usage")
    fingerprint = body.get("system_fingerprint")
    common: dict[str, Any] = {
        "entry_id": entry_id,
        "endpoint": endpoint,
        "model": model if isinstance(model, str) else "",
        "finish_reason": finish,
        "created_at": created_at,
        "usage": usage if isinstance(usage, dict) else None,
        "system_fingerprint": fingerprint if isinstance(fingerprint, str) else None,
    }
    if endpoint == "chat":
        message = choice.get("message")
        if not isinstance(message, dict):
            return None
        return CachedAnswer(message=message, **common)
    text = choice.get("text")
    if not isinstance(text, str):
        return None
    return CachedAnswer(text=text, **common)
