"""The upstream side of the gateway: one HTTP session, the replica pool and what watches and
uses it (router, admission, upstream, model discovery, health monitor); in demo mode, the
simulated replicas started in-process."""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass

from config.settings import Settings
from deja.observability.metrics import Metrics
from deja.upstream.admission import Admission
from deja.upstream.discovery import ModelDiscovery
from deja.upstream.health import HealthMonitor
from deja.upstream.pool import ReplicaPool
from deja.upstream.router import Router
from deja.upstream.upstream import Upstream, build_session

log = logging.getLogger("deja")


@dataclass(frozen=True)
class Replicas:
    """The upstream side: one HTTP session, the pool, and what watches and uses it."""

    upstream: Upstream
    discovery: ModelDiscovery
    monitor: HealthMonitor

    def simulated_urls(self) -> list[str]:
        """The simulated replicas ``--demo`` started in this process (a reload keeps them)."""
        pool = self.upstream.pool
        return [r.url for r in pool.replicas] if pool.simulated else []

    @classmethod
    async def open(cls, stack: AsyncExitStack, settings: Settings, metrics: Metrics) -> Replicas:
        urls, simulated = await replica_urls(stack, settings)
        http = build_session(
            connect_timeout=settings.upstream_connect_timeout_seconds,
            read_timeout=settings.upstream_timeout_seconds,
            max_connections=settings.upstream_max_connections,
        )
        stack.push_async_callback(http.close)
        pool = ReplicaPool(
            urls,
            cooldown=settings.replica_cooldown_seconds,
            scrape_interval=settings.health_check_interval_seconds,
            simulated=simulated,
            max_inflight=settings.replica_max_inflight,
        )
        metrics.watch_replicas(pool.samples)
        api_key = settings.replica_api_key.get_secret_value() if settings.replica_api_key else None
        router = Router(pool, settings.routing_policy, settings.routing_epsilon)
        timeout = settings.health_check_timeout_seconds
        admission = Admission(
            router,
            queue_size=settings.admission_queue_size,
            max_wait=settings.admission_max_wait_seconds,
            metrics=metrics,
        )
        return cls(
            upstream=Upstream(
                router,
                http,
                api_key,
                metrics,
                admission=admission,
                request_timeout=settings.request_timeout_seconds,
            ),
            discovery=ModelDiscovery(pool, http, timeout=timeout, api_key=api_key),
            monitor=HealthMonitor(
                pool, http, interval=settings.health_check_interval_seconds, timeout=timeout
            ),
        )


async def replica_urls(stack: AsyncExitStack, settings: Settings) -> tuple[list[str], bool]:
    """The configured replicas, or in demo mode simulated ones started in-process."""
    if settings.replicas or not settings.demo:
        if not settings.replicas:
            log.warning("no replicas configured (DEJA_REPLICAS); generation requests get 503")
        return list(settings.replicas), False
    from sim.config import SimConfig
    from sim.runner import start_simulators

    cluster = await start_simulators(settings.demo_replicas, SimConfig(), host="127.0.0.1")
    stack.push_async_callback(cluster.stop)
    log.warning(
        "no replicas configured: started %d SIMULATED vLLM replicas (deja sim) at %s "
        "-- answers are synthetic, not from a model",
        len(cluster.urls),
        ", ".join(cluster.urls),
    )
    return list(cluster.urls), True
