"""Single-flight across processes, best effort: a short Redis lock per entry id.

The process that takes the lock (``SET NX PX``) calls the replica; another process that finds
the lock held polls the exact store for the answer instead, until the lock goes (the leader
finished or died: its TTL is short) or its own deadline comes, and then calls the replica
itself. Nothing ever waits on the lock longer than the request's own deadline, and a Redis
failure means "not held": the request goes upstream as it would without coalescing.

On a Redis Cluster each lock is one key on its own slot's master (``SET NX PX``, and a release
script that reads and deletes that one key), so locks need no hash tag and spread by entry id.
"""

from __future__ import annotations

import logging
import secrets

from deja.redisclient import REDIS_ERRORS, RedisClient

log = logging.getLogger("deja.cache")

_PREFIX = "deja:flight:"
#: Deletes the lock only if this process still owns it (its TTL may have passed meanwhile).
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


class FlightLock:
    """``deja:flight:<entry id>`` locks on the shared Redis."""

    def __init__(self, client: RedisClient, *, ttl_seconds: float = 30.0) -> None:
        self.client = client
        self.ttl_ms = max(1, int(ttl_seconds * 1000))
        self.token = secrets.token_hex(8)
        self._release = client.register_script(_RELEASE)

    async def acquire(self, entry_id: str) -> bool:
        """True when this process now leads the flight (or Redis cannot tell: then lead)."""
        try:
            return bool(
                await self.client.set(_PREFIX + entry_id, self.token, nx=True, px=self.ttl_ms)
            )
        except REDIS_ERRORS as exc:
            log.debug("flight lock unavailable, leading: %s", exc)
            return True

    async def held(self, entry_id: str) -> bool:
        try:
            return bool(await self.client.exists(_PREFIX + entry_id))
        except REDIS_ERRORS:
            return False

    async def release(self, entry_id: str) -> None:
        try:
            await self._release(keys=[_PREFIX + entry_id], args=[self.token])
        except REDIS_ERRORS as exc:
            log.debug("flight lock release failed (it expires by itself): %s", exc)
