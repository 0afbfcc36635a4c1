"""Opening routing by resident prefix (``kv_models``): the model's tokenizers, the KV-event
subscribers and the task that watches them, closed with the gateway's exit stack."""

from __future__ import annotations

import asyncio
import contextlib
from contextlib import AsyncExitStack

from config.settings import Settings
from deja.observability.metrics import Metrics
from deja.upstream.kv.metrics import KVIndexCollector
from deja.upstream.kv.route import KVRouting, ModelSpec, endpoints_from_settings
from deja.upstream.pool import ReplicaPool


async def open_kv_routing(
    stack: AsyncExitStack, settings: Settings, pool: ReplicaPool, metrics: Metrics
) -> KVRouting | None:
    """Routing by resident prefix (``kv_models``): the tokenizers, the KV-event subscribers and
    their watcher task; None when no model is configured."""
    if not settings.kv_models:
        return None
    specs = {
        name: ModelSpec(m.tokenizer, m.chat_template, m.block_size, m.hash_algo, m.hash_seed)
        for name, m in settings.kv_models.items()
    }
    kv = KVRouting(
        specs,
        endpoints_from_settings(
            settings.kv_events, settings.kv_events_endpoint, settings.kv_events_replay_endpoint
        ),
        load_weight=settings.kv_route_load_weight,
        kv_weight=settings.kv_route_kv_weight,
        min_capacity=settings.kv_route_min_capacity,
        max_blocks=settings.kv_index_max_blocks,
        stale_tokens=settings.kv_stale_tokens,
    )
    metrics.registry.register(KVIndexCollector(kv))
    kv.check(pool)  # subscribe before the first request
    task = asyncio.get_running_loop().create_task(
        kv.watch(pool, settings.health_check_interval_seconds), name="deja-kv-watch"
    )

    async def close() -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await kv.close()

    stack.push_async_callback(close)
    return kv
