"""Talking to replicas: one pooled ``httpx.AsyncClient``, errors translated at this boundary.

Timeouts and pool limits are named in settings; the client is created in the app lifespan and
passed in, so tests can give it any transport.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from app.errors import (
    UpstreamClientError,
    UpstreamError,
    UpstreamServerError,
    UpstreamTimeoutError,
    UpstreamUnreachableError,
)
from middleware.replicas import Replica, ReplicaPool

log = logging.getLogger("deja.upstream")

JSON_HEADERS = {"content-type": "application/json", "accept-encoding": "identity"}
PASSTHROUGH_HEADERS = ("retry-after",)
HEALTH_TIMEOUT_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class UpstreamReply:
    """A complete non-streamed 200 answer from one replica."""

    replica: Replica
    body: bytes


@dataclass(frozen=True, slots=True)
class UpstreamStream:
    """An open 200 streaming answer; the caller must ``aclose()`` the response."""

    replica: Replica
    response: httpx.Response


def build_client(
    *,
    connect_timeout: float,
    read_timeout: float,
    max_connections: int,
    max_keepalive: int,
    transport: httpx.AsyncBaseTransport | None = None,
) -> httpx.AsyncClient:
    """The one upstream client of a gateway process."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(
            connect=connect_timeout, read=read_timeout, write=read_timeout, pool=connect_timeout
        ),
        limits=httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_keepalive
        ),
        transport=transport,
        follow_redirects=False,
    )


def _error_from_reply(
    status: int, body: bytes, headers: httpx.Headers, replica: Replica
) -> UpstreamError:
    try:
        parsed: Any = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        parsed = None
    message: str | None = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        message = parsed["error"].get("message")
    elif isinstance(parsed, dict) and isinstance(parsed.get("message"), str):
        message = parsed["message"]  # vLLM's older flat error shape
    if message is None:
        message = body[:500].decode("utf-8", "replace") or f"HTTP {status}"
    if status >= 500:
        return UpstreamServerError(
            f"replica {replica.name} failed with {status}: {message}", replica_status=status
        )
    if not (isinstance(parsed, dict) and isinstance(parsed.get("error"), dict)):
        parsed = {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        }
    extra = {name: headers[name] for name in PASSTHROUGH_HEADERS if name in headers}
    return UpstreamClientError(status, parsed, extra)


class Upstream:
    """Forwards requests to the pool's replicas; retries only connections that never opened."""

    def __init__(self, pool: ReplicaPool, client: httpx.AsyncClient, api_key: str | None) -> None:
        self.pool = pool
        self._client = client
        self._headers = dict(JSON_HEADERS)
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"

    async def _send(self, path: str, body: bytes, model: str) -> tuple[Replica, httpx.Response]:
        last: UpstreamError | None = None
        for replica in self.pool.candidates(model):
            request = self._client.build_request(
                "POST", replica.url + path, content=body, headers=self._headers
            )
            try:
                response = await self._client.send(request, stream=True)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                self.pool.mark_failed(replica, f"connect: {exc}")
                log.warning("replica %s unreachable, trying the next one", replica.name)
                last = UpstreamUnreachableError(f"replica {replica.name} is unreachable")
                last.__cause__ = exc
                continue
            except httpx.TimeoutException as exc:
                raise UpstreamTimeoutError(
                    f"replica {replica.name} did not answer in time"
                ) from exc
            except httpx.TransportError as exc:
                raise UpstreamUnreachableError(
                    f"connection to replica {replica.name} failed: {exc}"
                ) from exc
            self.pool.mark_ok(replica)
            return replica, response
        assert last is not None
        raise last

    async def complete(self, path: str, body: bytes, model: str) -> UpstreamReply:
        """Send a non-streamed request; a 200 answer comes back whole, anything else raises."""
        replica, response = await self._send(path, body, model)
        try:
            data = await response.aread()
        except httpx.TimeoutException as exc:
            raise UpstreamTimeoutError(f"replica {replica.name} did not answer in time") from exc
        except httpx.TransportError as exc:
            raise UpstreamUnreachableError(f"replica {replica.name} dropped: {exc}") from exc
        finally:
            await response.aclose()
        if response.status_code != 200:
            raise _error_from_reply(response.status_code, data, response.headers, replica)
        return UpstreamReply(replica=replica, body=data)

    async def open_stream(self, path: str, body: bytes, model: str) -> UpstreamStream:
        """Send a streamed request and return once the replica's 200 headers have arrived."""
        replica, response = await self._send(path, body, model)
        if response.status_code != 200:
            try:
                data = await response.aread()
            except httpx.HTTPError:
                data = b""
            finally:
                await response.aclose()
            raise _error_from_reply(response.status_code, data, response.headers, replica)
        return UpstreamStream(replica=replica, response=response)

    async def refresh_models(self) -> None:
        """Read ``/v1/models`` from every replica, concurrently."""

        async def one(replica: Replica) -> None:
            try:
                response = await self._client.get(
                    replica.url + "/v1/models",
                    headers=self._headers,
                    timeout=HEALTH_TIMEOUT_SECONDS,
                )
                response.raise_for_status()
                data = response.json().get("data")
            except (httpx.HTTPError, ValueError, AttributeError) as exc:
                log.warning("cannot read models from replica %s: %s", replica.name, exc)
                return
            if isinstance(data, list):
                models = [m for m in data if isinstance(m, dict) and "id" in m]
                self.pool.set_models(replica, models)

        await asyncio.gather(*(one(r) for r in self.pool.replicas))
        self.pool.models_refreshed_at = asyncio.get_running_loop().time()

    async def health(self) -> dict[str, bool]:
        """Probe every replica's ``/health``; name → reachable."""

        async def one(replica: Replica) -> bool:
            try:
                response = await self._client.get(
                    replica.url + "/health", timeout=HEALTH_TIMEOUT_SECONDS
                )
            except httpx.HTTPError:
                return False
            return response.status_code == 200

        results = await asyncio.gather(*(one(r) for r in self.pool.replicas))
        return {r.name: ok for r, ok in zip(self.pool.replicas, results, strict=True)}
