"""Which models the replicas serve: read from each replica's ``/v1/models`` at start-up, every
``model_refresh_seconds``, after a membership change, and (at most once per
``MODEL_REFRESH_ON_MISS_SECONDS``) when a request names a model nobody is known to serve."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiohttp
import orjson

from deja.errors import UpstreamError, describe
from deja.upstream.pool import Replica, ReplicaPool
from deja.upstream.upstream import map_aiohttp_errors

#: What ``deja sim`` writes in its models' ``owned_by`` ("deja-sim (simulated)").
SIMULATED_MARK = "(simulated)"
log = logging.getLogger("deja.upstream")

#: An unknown model triggers at most one model-list refresh per this many seconds.
MODEL_REFRESH_ON_MISS_SECONDS = 5.0


class ModelDiscovery:
    """Keeps ``pool``'s per-replica model lists current."""

    def __init__(
        self,
        pool: ReplicaPool,
        session: aiohttp.ClientSession,
        *,
        timeout: float,
        api_key: str | None = None,
    ) -> None:
        self.pool = pool
        self._session = session
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._headers = {"authorization": f"Bearer {api_key}"} if api_key else {}

    async def _models(self, replica: Replica) -> Any:
        with map_aiohttp_errors(replica.name, "listing its models"):
            async with self._session.get(
                replica.url + "/v1/models", headers=self._headers, timeout=self._timeout
            ) as response:
                response.raise_for_status()
                return orjson.loads(await response.read())

    async def refresh(self) -> None:
        """Read ``/v1/models`` from every replica, concurrently."""

        async def one(replica: Replica) -> None:
            try:
                data = (await self._models(replica)).get("data")
            except (UpstreamError, ValueError, AttributeError) as exc:
                log.warning("cannot read models from replica %s: %s", replica.name, describe(exc))
                return
            if isinstance(data, list):
                models = [m for m in data if isinstance(m, dict) and "id" in m]
                self.pool.set_models(replica, models)
                # deja's simulator says so in owned_by: label it wherever the replica shows
                if any(SIMULATED_MARK in str(m.get("owned_by", "")) for m in models):
                    replica.simulated = True

        await asyncio.gather(*(one(r) for r in self.pool.replicas))
        self.pool.models_refreshed_at = time.monotonic()

    async def knows(self, model: str) -> bool:
        """True when some replica serves ``model``, refreshing the lists once if it is unknown
        and the last refresh is older than ``MODEL_REFRESH_ON_MISS_SECONDS``."""
        if model in self.pool.known_models():
            return True
        if time.monotonic() - self.pool.models_refreshed_at > MODEL_REFRESH_ON_MISS_SECONDS:
            await self.refresh()
        return model in self.pool.known_models()

    async def run_forever(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            await self.refresh()
