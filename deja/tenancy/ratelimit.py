"""Per-key rate limits: a token bucket per client key, ``rpm`` tokens of capacity refilled at
``rpm / 60`` per second.

In one process the buckets live in memory. With several workers (``deja serve --workers N``)
or several gateways, they live in Redis, so a key's budget is global — not N × rpm. The Redis
bucket is one Lua script (read, refill, take, write, all atomic); if Redis fails, the request is
admitted and the failure logged: a cache outage must not turn into refused requests.

On a Redis Cluster the script runs on the master of its one key's slot: it touches no other
key (the clock is Redis's own ``TIME``), so it needs no hash tag, and buckets of different
keys spread over the masters.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Protocol

from deja.errors import RateLimitError
from deja.redisclient import REDIS_ERRORS, RedisClient

log = logging.getLogger("deja.tenancy")


class RateLimiter(Protocol):
    async def take(self, key_id: str, rpm: int) -> None:
        """Take one token of ``key_id``'s bucket or raise ``RateLimitError``."""


def limit_error(rpm: int, wait: float) -> RateLimitError:
    seconds = max(1, math.ceil(wait))
    return RateLimitError(
        f"Rate limit of {rpm} requests per minute reached for this key; retry in {seconds} s.",
        retry_after=seconds,
    )


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


@dataclass
class MemoryRateLimiter:
    """The buckets of one process."""

    buckets: dict[str, _Bucket] = field(default_factory=dict)

    async def take(self, key_id: str, rpm: int) -> None:
        self.take_at(key_id, rpm, time.monotonic())

    def take_at(self, key_id: str, rpm: int, now: float) -> None:
        bucket = self.buckets.get(key_id)
        if bucket is None:
            bucket = self.buckets[key_id] = _Bucket(tokens=float(rpm), updated=now)
        rate = rpm / 60.0
        bucket.tokens = min(float(rpm), bucket.tokens + (now - bucket.updated) * rate)
        bucket.updated = now
        if bucket.tokens < 1.0:
            raise limit_error(rpm, (1.0 - bucket.tokens) / rate)
        bucket.tokens -= 1.0


#: KEYS[1] bucket; ARGV: capacity, rate per second, now (s). Returns the wait in ms (0 = taken).
_TAKE = """
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'updated')
local tokens = tonumber(state[1]) or capacity
local updated = tonumber(state[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - updated) * rate)
local wait = 0
if tokens < 1 then
  wait = math.ceil((1 - tokens) / rate * 1000)
else
  tokens = tokens - 1
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'updated', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(capacity / rate * 1000) + 1000)
return wait
"""


class RedisRateLimiter:
    """Buckets shared by every process on one Redis (``deja:rl:<key id>``). The clock is
    Redis's own (``TIME``), so processes with skewed clocks share one bucket honestly."""

    def __init__(self, client: RedisClient) -> None:
        self.client = client
        self._take = client.register_script(_TAKE.replace("local now = tonumber(ARGV[3])", _NOW))

    async def take(self, key_id: str, rpm: int) -> None:
        try:
            wait_ms = int(await self._take(keys=[f"deja:rl:{key_id}"], args=[rpm, rpm / 60.0]))
        except REDIS_ERRORS as exc:
            log.warning("rate limit store unavailable, admitting the request: %s", exc)
            return
        if wait_ms > 0:
            raise limit_error(rpm, wait_ms / 1000.0)


_NOW = "local t = redis.call('TIME')\nlocal now = tonumber(t[1]) + tonumber(t[2]) / 1000000"
