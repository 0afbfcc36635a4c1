"""The resources of one gateway process, built in the lifespan and reachable via ``app.state``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import aiohttp
from starlette.requests import Request

from config.settings import Settings
from middleware.exact import ExactStore
from middleware.pipeline import Pipeline
from middleware.upstream import Upstream


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
    simulators: list[Stoppable] = field(default_factory=list)


def gateway_of(request: Request) -> Gateway:
    """The gateway that owns this request's app."""
    gateway: Gateway = request.app.state.gateway
    return gateway
