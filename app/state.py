"""The resources of one gateway process, built in the lifespan and reachable via ``app.state``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import aiohttp
from starlette.requests import Request

from config.settings import Settings
from middleware.exact import ExactStore
from middleware.metrics import Metrics
from middleware.pipeline import Pipeline
from middleware.tenants import KeyRing, RateLimiter
from middleware.thresholds import Thresholds, ThresholdStore
from middleware.upstream import Upstream

log = logging.getLogger("deja")


class Stoppable(Protocol):
    async def stop(self) -> None: ...


@dataclass
class Gateway:
    """Everything a request handler needs; no module-level singletons anywhere."""

    settings: Settings
    http: aiohttp.ClientSession
    upstream: Upstream
    exact: ExactStore | None
    pipeline: Pipeline
    keys: KeyRing
    limiter: RateLimiter
    thresholds: Thresholds
    threshold_store: ThresholdStore
    metrics: Metrics
    simulators: list[Stoppable] = field(default_factory=list)
    reload: Callable[[], Settings] | None = None
    background: set[asyncio.Task[None]] = field(default_factory=set)

    def reload_replicas(self, replicas: list[str]) -> None:
        """Swap the replica list in place: in-flight requests finish where they are."""
        pool = self.upstream.pool
        before = {r.url for r in pool.replicas}
        pool.update(replicas)
        after = {r.url for r in pool.replicas}
        log.warning(
            "replicas reloaded: %d now (added %s, removed %s)",
            len(after),
            sorted(after - before) or "none",
            sorted(before - after) or "none",
        )
        task = asyncio.get_running_loop().create_task(self.upstream.refresh_models())
        self.background.add(task)
        task.add_done_callback(self.background.discard)


def gateway_of(request: Request) -> Gateway:
    """The gateway that owns this request's app."""
    gateway: Gateway = request.app.state.gateway
    return gateway
