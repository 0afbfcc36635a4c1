"""A replica's JSON answer as the pipeline handles it: parsed for the cache, and with the RAG
sources added for the client."""

from __future__ import annotations

from typing import Any

import orjson

from deja.cache.entry import CachedAnswer, answer_from_json
from deja.request import GatewayRequest
from middleware.replay import SOURCES_FIELD


def parse_answer(
    body: bytes, entry_id: str, req: GatewayRequest, created: float
) -> CachedAnswer | None:
    """The cacheable answer in a replica's JSON body, or None."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, dict):
        return None
    return answer_from_json(parsed, entry_id=entry_id, endpoint=req.endpoint, created_at=created)


def with_sources(body: bytes, sources: list[dict[str, Any]]) -> bytes:
    """A replica's JSON answer with the ``deja_sources`` field added (left as it is when it is
    not a JSON object)."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    if not isinstance(parsed, dict):
        return body
    parsed[SOURCES_FIELD] = sources
    return orjson.dumps(parsed)
