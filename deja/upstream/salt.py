"""Prefix caches isolated per tenant: vLLM's ``cache_salt``.

vLLM mixes a request's ``cache_salt`` into its first block's hash, so only requests with the
same salt can hit each other's cached blocks: another tenant can neither reuse nor time them.
The gateway salts every request with its tenant (``t:`` + 16 hex of blake2b of the tenant's
name). A tenant marked ``share_prefix_cache: true`` in the keys file (a deliberately shared
system prompt) gets no tenant part. A client's own ``cache_salt`` is kept as ``c:``-prefixed
suffix (it can only isolate further): no client can choose a salt that equals another
tenant's, since those always start with ``t:``.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Any

import orjson

__all__ = ["keyed", "request_salt", "tenant_salt", "with_cache_salt"]

_FIELD = b'"cache_salt"'


@lru_cache(maxsize=4096)
def tenant_salt(tenant: str) -> str:
    """The salt of a tenant's requests."""
    return "t:" + hashlib.blake2b(tenant.encode(), digest_size=8).hexdigest()


def request_salt(tenant: str, shared: bool, client_salt: Any) -> str | None:
    """The salt sent to the replica: the tenant's part (unless ``shared``), then the client's."""
    parts = [] if shared else [tenant_salt(tenant)]
    if isinstance(client_salt, str) and client_salt:
        parts.append("c:" + client_salt)
    return "|".join(parts) or None


def with_cache_salt(raw: bytes, salt: str | None) -> bytes:
    """``raw`` (a JSON object) with ``cache_salt`` set to ``salt`` (removed when None).

    Without a client salt in the body, the field is spliced in after the opening brace (no
    re-serialisation of a long prompt); otherwise the body is re-encoded."""
    if _FIELD not in raw:
        if salt is None:
            return raw
        stripped = raw.lstrip()
        if stripped[:1] == b"{":
            rest = stripped[1:]
            comma = b"" if rest.lstrip()[:1] == b"}" else b","
            return b'{"cache_salt":' + orjson.dumps(salt) + comma + rest
    updated = orjson.loads(raw)
    if salt is None:
        updated.pop("cache_salt", None)
    else:
        updated["cache_salt"] = salt
    return orjson.dumps(updated)


def keyed(
    headers: dict[str, str], body: bytes, prefix_key: str | None
) -> tuple[dict[str, str], bytes]:
    """The headers and body a replica gets for a request routed by ``prefix_key``: the key as
    ``X-Prefix-Hash`` (an L7 balancer between deja and the replicas can hash on it) and, when
    it carries one (a ``RouteKey``), the tenant's ``cache_salt`` written into the body."""
    if prefix_key:
        headers = {**headers, "x-prefix-hash": str(prefix_key)}
    salt = getattr(prefix_key, "salt", None)
    if salt is not None:
        body = with_cache_salt(body, salt)
    return headers, body
