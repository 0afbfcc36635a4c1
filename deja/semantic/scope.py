"""What the semantic layer compares: the question text of a request and the scope it may be
served in.

What is embedded is the text of the last user message. The scope is exact: tenant, namespace,
model, a hash of the output-affecting parameters, and a hash of the conversation context before
that message (``conversation``: system prompt plus earlier turns; ``system``: the system prompt
only). So "and the second one?" can only hit inside an identical conversation.

RAG requests (a corpus named) add the corpus to that context hash; the retrieved chunks are never
part of the scope, because the cache sits ahead of the retriever. ``X-Deja-Context-Id`` replaces
the context hash: an application that retrieves on its own says which contexts are equivalent.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from deja.cache.keys import answer_fields
from deja.request import GatewayRequest
from deja.semantic.index import Scope

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


def beyond_text(message: dict[str, Any]) -> dict[str, Any]:
    """Everything in a message besides its text that could change the answer: every non-text
    content part (images, audio, files — with their data or URL) and the fields other than
    role and content (``name``, …). Empty for a plain text message. The same question about
    another image, or from another ``name``, is another question."""
    extra: dict[str, Any] = {
        k: v for k, v in message.items() if k not in ("role", "content") and v is not None
    }
    content = message.get("content")
    if isinstance(content, list):
        parts = [p for p in content if not (isinstance(p, dict) and p.get("type") == "text")]
        if parts:
            extra["parts"] = parts
    return extra


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


def context_hash(
    earlier: list[dict[str, Any]],
    beyond: dict[str, Any],
    *,
    corpus: str | None = None,
    context_id: str | None = None,
) -> str:
    """The scope's context part. A plain text question keeps the context-only hash, so entries
    stored before non-text parts counted still match; anything beyond the text, a corpus or a
    context id makes its own scope."""
    context: Any = earlier if context_id is None else {"context_id": context_id}
    if corpus is None and context_id is None and not beyond:
        return _digest(context)
    marked: dict[str, Any] = {"context": context}
    if beyond:
        marked["last"] = beyond
    if corpus is not None:
        marked["corpus"] = corpus
    return _digest(marked)


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
    messages = req.body["messages"]
    earlier = messages[:-1]
    if rule == "system":
        earlier = [m for m in earlier if m.get("role") in _SYSTEM_ROLES]
    beyond = beyond_text(messages[-1])
    context = context_hash(earlier, beyond, corpus=req.corpus_scope, context_id=req.context_id)
    scope = Scope(
        tenant=req.tenant,
        namespace=namespace,
        model=req.model,
        params_hash=params_hash(req.body),
        context_hash=context,
    )
    return SemanticQuery(text=text, scope=scope)
