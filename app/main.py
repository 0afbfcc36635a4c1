"""The app factory: the FastAPI app (lifespan, health, models, admin) behind the generation
fast path. Every resource comes from ``Gateway.build``."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator, Callable
from typing import BinaryIO

from fastapi import FastAPI
from fastapi.routing import APIRoute, APIRouter
from opentelemetry.sdk.trace.export import SpanExporter

from app.api import (
    admin,
    admin_cache,
    admin_corpus,
    admin_insight,
    admin_labels,
    admin_semantic,
    console,
    embeddings,
    feedback,
    health,
    openai_routes,
)
from app.api.docs import OPENAPI_PATH, SWAGGER_PATH, install_docs_off
from app.api.errors import install_error_handlers
from app.gateway import Gateway
from config.settings import Settings
from middleware.asgi import DejaApp
from middleware.bodyread import BodyReadTimeout


def _head_where_get(router: APIRouter) -> APIRouter:
    """HEAD wherever GET works (Starlette's plain routes do so already; FastAPI's do not):
    the same handler, and the server sends the headers without the body. The HEAD twin stays
    out of the OpenAPI schema, which would otherwise hold each GET's operation id twice."""
    heads = []
    for route in router.routes:
        if isinstance(route, APIRoute) and route.methods and "GET" in route.methods:
            head = copy.copy(route)
            head.methods, head.include_in_schema = {"HEAD"}, False
            heads.append(head)
    router.routes.extend(heads)
    return router


def create_app(
    settings: Settings,
    *,
    reload: Callable[[], Settings] | None = None,
    span_exporter: SpanExporter | None = None,
    access_sink: BinaryIO | None = None,
) -> DejaApp:
    """Build the gateway app.

    ``reload`` re-reads the settings on SIGHUP and ``POST /admin/replicas/reload``;
    ``span_exporter`` receives the traces (tests); otherwise ``OTEL_*`` variables decide;
    ``access_sink`` receives the access log (default stderr).
    """

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with Gateway.build(
            settings, reload=reload, span_exporter=span_exporter, access_sink=access_sink
        ) as gateway:
            app.state.gateway = gateway
            yield

    app = FastAPI(
        title="deja",
        summary="OpenAI-compatible caching gateway for vLLM",
        lifespan=lifespan,
        # No schema unless DEJA_API_DOCS: it lists the whole admin API to anyone who reaches
        # the port.
        openapi_url=OPENAPI_PATH if settings.api_docs else None,
        docs_url=SWAGGER_PATH if settings.api_docs else None,
        redoc_url=None,
        # Starlette's slash redirect builds an absolute Location from the Host header the
        # client sent; app.api.errors redirects with a path-only Location instead.
        redirect_slashes=False,
    )
    install_error_handlers(app)
    if not settings.api_docs:
        install_docs_off(app)
    app.router.routes.extend(openai_routes.routes)
    app.router.routes.extend(embeddings.routes)
    app.router.routes.extend(feedback.routes)
    app.router.routes.extend(health.routes)
    for module in (
        admin,
        admin_cache,
        admin_semantic,
        admin_corpus,
        admin_insight,
        admin_labels,
        console,
    ):
        app.include_router(_head_where_get(module.router))
    gateway_app = DejaApp(app, {**openai_routes.fast_routes, **embeddings.fast_routes})
    gateway_app.add_middleware(BodyReadTimeout, timeout=settings.body_read_timeout_seconds)
    return gateway_app
