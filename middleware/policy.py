"""Step 1 of the request path: what this request may read from and write to the cache.

``Cache-Control: no-cache`` skips the lookup but still stores; ``no-store`` never stores;
``max-age=N`` accepts only entries younger than N seconds; ``X-Deja-TTL: N`` sets this entry's
TTL, capped by ``cache_max_ttl_seconds``; ``X-Deja-Threshold: θ`` asks for a stricter semantic
threshold than the configured one (a looser one is ignored).
"""

from __future__ import annotations

from collections.abc import Mapping

from deja.errors import InvalidRequestError
from deja.request import CachePolicy


def _parse_seconds(raw: str, header: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidRequestError(
            f"{header} must be a non-negative whole number of seconds, got {raw!r}", param=header
        )
    return value


def parse_policy(headers: Mapping[str, str], *, default_ttl: int, max_ttl: int) -> CachePolicy:
    """Read ``Cache-Control`` and ``X-Deja-TTL`` from the request headers (lower-case keys)."""
    read = write = True
    max_age: float | None = None
    cache_control = headers.get("cache-control")
    if cache_control:
        for directive in cache_control.split(","):
            name, _, arg = directive.strip().partition("=")
            name = name.strip().lower()
            if name == "no-cache":
                read = False
            elif name == "no-store":
                write = False
            elif name == "max-age":
                max_age = float(_parse_seconds(arg.strip('" '), "Cache-Control max-age"))
    ttl = default_ttl
    raw_ttl = headers.get("x-deja-ttl")
    if raw_ttl is not None:
        ttl = _parse_seconds(raw_ttl, "X-Deja-TTL")
        if ttl == 0:
            write = False
        ttl = min(ttl, max_ttl)
    min_similarity: float | None = None
    raw_threshold = headers.get("x-deja-threshold")
    if raw_threshold is not None:
        try:
            min_similarity = float(raw_threshold)
        except ValueError:
            min_similarity = -1.0
        if not 0.0 <= min_similarity <= 1.0:
            raise InvalidRequestError(
                f"X-Deja-Threshold must be a number between 0 and 1, got {raw_threshold!r}",
                param="X-Deja-Threshold",
            )
    return CachePolicy(
        read=read, write=write, max_age=max_age, ttl=max(ttl, 1), min_similarity=min_similarity
    )
