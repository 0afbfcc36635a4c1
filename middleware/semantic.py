"""Step 4 of the request path: the semantic layer.

What is embedded is the text of the last user message. The scope a cached question may be served
in is exact: tenant, namespace, model, a hash of the output-affecting parameters, and a hash of
the conversation context before that message (``conversation``: system prompt plus earlier
turns; ``system``: the system prompt only). So "and the second one?" can only hit inside an
identical conversation. The answer itself lives in the exact store under the entry id; the
vector store is an index over questions, so removing an entry from the exact store removes its
semantic hits too.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import orjson

from app.errors import EmbedderError, VectorStoreError
from middleware.embedder import Embedder
from middleware.entry import CachedAnswer
from middleware.keys import answer_fields
from middleware.request import GatewayRequest
from middleware.tracing import Tracing
from middleware.vectorstore import Scope, ScoredPoint, VectorPoint, VectorStore

log = logging.getLogger("deja.semantic")

ContextRule = Literal["conversation", "system"]

#: Fields that are the question itself (or its model), not parameters of the answer.
_QUESTION_FIELDS = frozenset({"messages", "model"})
_SYSTEM_ROLES = frozenset({"system", "developer"})


def _digest(value: Any) -> str:
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


def params_hash(body: dict[str, Any]) -> str:
    """Hash of every answer-affecting field except the messages and the model."""
    return _digest(answer_fields(body, exclude=_QUESTION_FIELDS))


def message_text(message: dict[str, Any]) -> str:
    """The text of a message: a string content, or its text parts joined by newlines."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            p["text"]
            for p in content
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        ]
        return "\n".join(parts)
    return ""


def question_text(req: GatewayRequest) -> str:
    """The text a request asks: the last message if it is the user's (chat), or the prompt
    (completions). Empty when there is no user text (tool results, images, token ids)."""
    if req.endpoint == "chat":
        last = req.body["messages"][-1]
        return message_text(last).strip() if last.get("role") == "user" else ""
    prompt = req.body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    return prompt.strip() if isinstance(prompt, str) else ""


@dataclass(frozen=True, slots=True)
class SemanticQuery:
    """What the semantic layer looks up for one chat request."""

    text: str
    scope: Scope


def semantic_query(
    req: GatewayRequest, rule: ContextRule, namespace: str = ""
) -> SemanticQuery | None:
    """The semantic lookup for a chat request, or None when the layer does not apply."""
    if req.endpoint != "chat" or not req.cacheable:
        return None
    text = question_text(req)
    if not text:
        return None
    earlier = req.body["messages"][:-1]
    if rule == "system":
        earlier = [m for m in earlier if m.get("role") in _SYSTEM_ROLES]
    scope = Scope(
        tenant=req.tenant,
        namespace=namespace,
        model=req.model,
        params_hash=params_hash(req.body),
        context_hash=_digest(earlier),
    )
    return SemanticQuery(text=text, scope=scope)


@dataclass(frozen=True, slots=True)
class Candidate:
    """The nearest cached question in scope, before any verification."""

    point: ScoredPoint
    answer: CachedAnswer


class Verifier(Protocol):
    """Decides whether a candidate found by similarity may be served (a later issue)."""

    async def accept(self, query: SemanticQuery, candidate: Candidate) -> bool: ...


@dataclass(frozen=True, slots=True)
class SemanticResult:
    """What a lookup saw: the vector (reused when storing), the best score, a hit if any."""

    vector: list[float]
    best_score: float | None
    hit: Candidate | None = None


class SemanticCache:
    """Embeds questions and searches/stores them in the vector store."""

    def __init__(
        self,
        embedder: Embedder,
        store: VectorStore,
        on_embedded: Callable[[float], None] | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.embedder = embedder
        self.store = store
        self.on_embedded = on_embedded
        self.tracing = tracing or Tracing()

    async def search(
        self, query: SemanticQuery, *, max_age: float | None
    ) -> tuple[list[float], ScoredPoint | None]:
        """Embed and return the top-1 unexpired neighbour in scope (any score)."""
        started = time.perf_counter()
        with self.tracing.span("deja.embed"):
            vector = await self.embedder.embed(query.text)
        if self.on_embedded is not None:
            self.on_embedded(time.perf_counter() - started)
        now = time.time()
        created_after = now - max_age if max_age is not None else None
        found = await self.store.search(
            vector, query.scope, now=now, limit=1, created_after=created_after
        )
        return vector, (found[0] if found else None)

    async def add(
        self,
        query: SemanticQuery,
        *,
        entry_id: str,
        vector: list[float] | None,
        created_at: float,
        ttl: int,
    ) -> None:
        """Index a stored answer's question (embedding it first if the lookup did not)."""
        if vector is None:
            vector = await self.embedder.embed(query.text)
        point = VectorPoint(
            entry_id=entry_id,
            vector=vector,
            scope=query.scope,
            question=query.text,
            created_at=created_at,
            expires_at=created_at + ttl,
            extra={"embedder": self.embedder.model_id, "dim": self.embedder.dim},
        )
        await self.store.upsert([point])

    async def sweep(self) -> int:
        """Delete expired points; returns how many went."""
        try:
            removed = await self.store.delete_expired(time.time())
        except VectorStoreError as exc:
            log.warning("semantic sweep failed: %s", exc)
            return 0
        if removed:
            log.info("semantic sweep removed %d expired entries", removed)
        return removed


SEMANTIC_ERRORS = (EmbedderError, VectorStoreError, TimeoutError)
