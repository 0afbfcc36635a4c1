"""The request path's assembly: each step handed the parts below it (``middleware.pipeline``),
single-flight only with a cache."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import BinaryIO

from app.wiring.semantic import temporal_detector
from app.wiring.stores import flight_lock
from config.settings import Settings
from deja.cache.exact.aliases import AliasedStore
from deja.diskspace import DiskSpace
from deja.observability.accesslog import AccessLog
from deja.upstream.prefix import PrefixConfig
from deja.upstream.upstream import Upstream
from middleware.flight import Flights, FlightStep
from middleware.lookup import LookupStep
from middleware.memo import RequestMemo
from middleware.pipeline import Pipeline
from middleware.produce import ProduceStep
from middleware.record import Observability
from middleware.retrieve import RetrieveStep
from middleware.semantic import SemanticStep
from middleware.store import StoreStep
from middleware.tasks import BackgroundTasks


def background_tasks(stack: AsyncExitStack) -> BackgroundTasks:
    """The gateway's background work; pending stores finish before the stores close."""
    background = BackgroundTasks()
    stack.push_async_callback(background.drain)
    return background


def access_log(settings: Settings, sink: BinaryIO | None) -> AccessLog | None:
    """The access log (``DEJA_ACCESS_LOG``), written to ``sink`` when given (tests)."""
    return AccessLog(sink) if settings.access_log else None


async def open_pipeline(
    stack: AsyncExitStack,
    settings: Settings,
    *,
    semantic: SemanticStep | None,
    observability: Observability,
    exact: AliasedStore | None,
    upstream: Upstream,
    background: BackgroundTasks,
    retrieve: RetrieveStep | None,
    space: DiskSpace | None,
) -> Pipeline:
    """The request path over the parts the gateway opened (single-flight only with a cache)."""
    flights = Flights() if settings.single_flight and exact is not None else None
    if flights is not None:
        stack.push_async_callback(flights.close)
    lock = await flight_lock(stack, settings) if flights is not None else None
    metrics, tracing = observability.metrics, observability.tracing
    lookup_step = LookupStep(
        exact,
        metrics,
        tracing,
        semantic_step=semantic,
        temporal=temporal_detector(settings),
        space=space,
    )
    store_step = None
    if exact is not None:
        store_step = StoreStep(exact, metrics, tracing, background, semantic)
    prefix = PrefixConfig(
        settings.prefix_mode, settings.prefix_block_size, settings.prefix_max_blocks
    )
    produce_step = ProduceStep(
        upstream, metrics, tracing, prefix=prefix, retrieve_step=retrieve, store_step=store_step
    )
    flight_step = None
    if flights is not None and exact is not None:
        flight_step = FlightStep(produce_step, flights, exact, metrics, lock)
    return Pipeline(
        lookup_step,
        produce_step,
        observability=observability,
        flight_step=flight_step,
        background=background,
        memo=RequestMemo(settings.request_memo_entries),
    )
