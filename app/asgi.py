"""The ASGI entry point: the generation routes ahead of FastAPI, everything else through it.

``POST /v1/chat/completions`` and ``POST /v1/completions`` are the hot path: dispatched here
directly, they skip FastAPI's middleware stack (each layer wraps ``send``) and route matching,
which measured as about a fifth of the CPU of an exact hit. Errors still leave through the one
mapping in ``app.api.errors``. Lifespan, health, models and any later admin routes go to FastAPI.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from fastapi import FastAPI
from starlette.datastructures import State
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.api.errors import error_response

Handler = Callable[[Request], Awaitable[Response]]


class DejaApp:
    """The gateway as one ASGI callable."""

    def __init__(self, api: FastAPI, fast_routes: Mapping[str, Handler]) -> None:
        self.api = api
        self._fast = dict(fast_routes)

    @property
    def state(self) -> State:
        """The FastAPI app's state (``state.gateway`` holds the process's resources)."""
        return self.api.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            handler = self._fast.get(scope["path"])
            if handler is not None:
                scope["app"] = self.api
                request = Request(scope, receive)
                try:
                    response = await handler(request)
                except Exception as exc:  # mapped to an OpenAI-shaped error, never re-raised
                    response = error_response(request, exc)
                await response(scope, receive, send)
                return
        await self.api(scope, receive, send)
