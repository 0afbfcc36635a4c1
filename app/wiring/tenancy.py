"""Who may call and how much: the client keys (and the keys file followed while serving), the
rate limiter, and the store θ and the precision targets live in (shared through Redis when the
gateway has one, else a file under data_dir)."""

from __future__ import annotations

import logging

from config.settings import Settings
from deja.redisclient import RedisClient
from deja.tenancy.keyring import KeyRing
from deja.tenancy.keywatch import KeysFile
from deja.tenancy.ratelimit import MemoryRateLimiter, RateLimiter, RedisRateLimiter
from deja.tenancy.thresholds import FileThresholdStore, RedisThresholdStore, ThresholdStore

log = logging.getLogger("deja")


def client_keys(settings: Settings) -> tuple[KeyRing, KeysFile | None]:
    """The keys file's tenants (open mode without one), warning about what is left open, and
    the file to follow for changes."""
    if settings.admin_key is None:
        log.warning("DEJA_ADMIN_KEY is not set: the admin API (/admin) is disabled")
    if settings.keys_file is None:
        log.warning(
            "NO CLIENT KEYS CONFIGURED (DEJA_KEYS_FILE): the gateway is open, every caller "
            "is tenant 'default'"
        )
        return KeyRing(), None
    keys_file = KeysFile(settings.keys_file)
    return keys_file.load(), keys_file


def rate_limiter(redis: RedisClient | None) -> RateLimiter:
    """Token buckets in Redis (one budget per key across every worker) or in this process."""
    return RedisRateLimiter(redis) if redis is not None else MemoryRateLimiter()


def threshold_store(settings: Settings, redis: RedisClient | None) -> ThresholdStore:
    """Where live θ and precision targets are saved and polled from."""
    if redis is not None:
        return RedisThresholdStore(redis)
    return FileThresholdStore(settings.data_dir / "thresholds.json")
