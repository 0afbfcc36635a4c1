"""The ASGI entry point: the generation routes ahead of FastAPI, everything else through it.

``POST /v1/chat/completions`` and ``POST /v1/completions`` are the hot path: dispatched here
directly, they skip FastAPI's middleware stack (each layer wraps ``send``) and route matching,
which measured as about a fifth of the CPU of an exact hit. Errors still leave through the one
mapping in ``middleware.errors``. Lifespan, health, models and admin routes go to FastAPI.

Because the fast path skips FastAPI's stack, ASGI middleware must wrap :class:`DejaApp` itself
(``DejaApp.add_middleware``), so it applies to every route; middleware added to the inner FastAPI
app would silently miss ``/v1/*``, and start-up refuses it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi import FastAPI
from starlette.datastructures import State
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from middleware.errors import error_response

Handler = Callable[[Request], Awaitable[Response]]


class DejaApp:
    """The gateway as one ASGI callable: outer middleware → fast path | FastAPI."""

    def __init__(self, api: FastAPI, fast_routes: Mapping[str, Handler]) -> None:
        self.api = api
        self._fast = dict(fast_routes)
        self._entry: ASGIApp = self._dispatch
        self._checked = False

    @property
    def state(self) -> State:
        """The FastAPI app's state (``state.gateway`` holds the process's resources)."""
        return self.api.state

    def add_middleware(self, middleware: Callable[..., ASGIApp], **options: Any) -> None:
        """Wrap the whole gateway (fast path included) in an ASGI middleware, outermost last."""
        self._entry = middleware(self._entry, **options)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._checked:
            self._checked = True
            if self.api.user_middleware:
                raise RuntimeError(
                    "middleware added to the inner FastAPI app would skip /v1/*: "
                    "use DejaApp.add_middleware"
                )
        await self._entry(scope, receive, send)

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            handler = self._fast.get(scope["path"])
            if handler is not None:
                scope["app"] = self.api
                request = Request(scope, receive)
                try:
                    response = await handler(request)
                except Exception as exc:  # mapped to an OpenAI-shaped error, never re-raised
                    response = error_response(exc, f"POST {scope['path']}")
                await response(scope, receive, send)
                return
        await self.api(scope, receive, send)
