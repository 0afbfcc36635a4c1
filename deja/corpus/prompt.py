"""The RAG prompt template: what a retrieving request sends to the replica.

One system message, built in a fixed order so the replicas' prefix cache sees the same prefix
for every question that retrieves the same chunks:

1. the static system prompt (``rag_system_prompt``), then the application's own system or
   developer instructions, in order;
2. the context block: the chunks in :func:`deja.corpus.base.context_order` (document id, chunk
   index — never the score, which differs from question to question);
3. then the rest of the conversation, unchanged.

Only one system message is sent because many chat templates accept only one, first. The prefix
key (``deja.upstream.prefix``, static mode) hashes the leading system message, so it covers the
system prompt and the context block.
"""

from __future__ import annotations

from typing import Any, Literal

from deja.corpus.base import RetrievedChunk, context_order
from deja.semantic.scope import message_text

_INSTRUCTION_ROLES = frozenset({"system", "developer"})

#: ``document``: document id, then chunk index (the default). ``score``: best first, as most
#: RAG apps do — kept only so the benchmark can show what it costs the prefix cache.
ContextOrder = Literal["document", "score"]


def context_block(chunks: list[RetrievedChunk], order: ContextOrder = "document") -> str:
    """The chunks as one block of text, each headed by ``[document#index]`` (a chunk's text
    starts with its heading path already), in context order."""
    ordered = (
        context_order(chunks) if order == "document" else sorted(chunks, key=lambda r: -r.score)
    )
    parts = []
    for retrieved in ordered:
        chunk = retrieved.chunk
        parts.append(f"[{chunk.document}#{chunk.index}]\n{chunk.text.strip()}")
    return "\n\n".join(parts)


def with_context(
    body: dict[str, Any],
    chunks: list[RetrievedChunk],
    system_prompt: str,
    order: ContextOrder = "document",
) -> dict[str, Any]:
    """A copy of the chat ``body`` whose messages are the RAG prompt: one system message
    (static prompt, the application's instructions, the context block), then the
    conversation without its leading instructions."""
    messages: list[dict[str, Any]] = body["messages"]
    lead = 0
    while lead < len(messages) and messages[lead].get("role") in _INSTRUCTION_ROLES:
        lead += 1
    sections = [system_prompt.strip()] if system_prompt.strip() else []
    sections += [text for m in messages[:lead] if (text := message_text(m).strip())]
    block = context_block(chunks, order)
    sections.append(f"Context:\n{block}" if block else "Context: (no matching documents)")
    system = {"role": "system", "content": "\n\n".join(sections)}
    return {**body, "messages": [system, *messages[lead:]]}
