"""Canonical exact-match keys.

The key is sha256 over a canonical JSON (sorted keys, no whitespace) of everything that can change
the answer. It is built from a deny-list: every request field counts, except the ones listed in
``NON_SEMANTIC_FIELDS``, which only change how the answer is delivered or who is billed. A field
deja has never heard of (a vLLM extra such as ``top_k`` or ``guided_json``) therefore changes the
key, which is the safe direction: an unknown field can cost a hit, never serve a wrong answer.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Literal

import orjson

KEY_VERSION = 1

Endpoint = Literal["chat", "completion", "embeddings"]

#: Fields that never change the answer's content, so they are left out of the key.
NON_SEMANTIC_FIELDS: frozenset[str] = frozenset(
    {
        "stream",  # delivery shape only: a hit is replayed as JSON or SSE as asked
        "stream_options",  # include_usage only adds a usage chunk
        "user",  # end-user id for abuse tracking
        "metadata",  # free-form tags
        "store",  # OpenAI-side storage flag
        "service_tier",  # scheduling class
        "prompt_cache_key",  # provider prompt-cache routing hint
        "safety_identifier",  # end-user id for abuse tracking
        "request_id",  # vLLM request id
        "priority",  # vLLM scheduling priority
    }
)

#: Numeric sampling fields normalised to float so ``1`` and ``1.0`` give the same key.
FLOAT_FIELDS: frozenset[str] = frozenset(
    {
        "temperature",
        "top_p",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "min_p",
    }
)


def answer_fields(body: dict[str, Any], exclude: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The fields of a request that can change its answer, normalised, minus ``exclude``."""
    fields: dict[str, Any] = {}
    for name, value in body.items():
        if name in NON_SEMANTIC_FIELDS or name in exclude:
            continue
        if name in FLOAT_FIELDS and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        fields[name] = value
    return fields


def canonical_request(
    tenant: str, endpoint: Endpoint, body: dict[str, Any], namespace: str = ""
) -> bytes:
    """The canonical bytes a key is hashed from."""
    fields = answer_fields(body)
    document = {
        "v": KEY_VERSION,
        "tenant": tenant,
        "namespace": namespace,
        "endpoint": endpoint,
        "request": fields,
    }
    return orjson.dumps(document, option=orjson.OPT_SORT_KEYS)


#: The shape of an entry id (a cache key): 64 lower-case hex digits of sha256.
ENTRY_ID = re.compile(r"[0-9a-f]{64}")


def cache_key(tenant: str, endpoint: Endpoint, body: dict[str, Any], namespace: str = "") -> str:
    """Hex sha256 of the canonical request: the cache key, which is also the entry id of the
    answer stored under it in every layer."""
    return hashlib.sha256(canonical_request(tenant, endpoint, body, namespace)).hexdigest()
