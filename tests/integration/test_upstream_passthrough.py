"""What the gateway sends upstream, seen by a capturing replica on a real socket."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from deja.upstream.salt import tenant_salt
from tests.support import serve

pytestmark = pytest.mark.integration

MODELS = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "x"}]}
ANSWER = {
    "id": "x",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
}


class Capture:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.auth: list[str | None] = []
        self.prefix: list[str | None] = []

    def app(self) -> Starlette:
        async def models(request: Request) -> Response:
            return JSONResponse(MODELS)

        async def chat(request: Request) -> Response:
            body = await request.body()
            self.bodies.append(body)
            self.auth.append(request.headers.get("authorization"))
            self.prefix.append(request.headers.get("x-prefix-hash"))
            if orjson.loads(body).get("stream"):
                return Response(b"data: [DONE]\n\n", media_type="text/event-stream")
            return JSONResponse(ANSWER)

        async def health(request: Request) -> Response:
            return Response(b"")

        return Starlette(
            routes=[
                Route("/health", health),
                Route("/v1/models", models),
                Route("/v1/chat/completions", chat, methods=["POST"]),
            ]
        )


@pytest.fixture
async def replica() -> AsyncIterator[tuple[str, Capture]]:
    capture = Capture()
    async with serve(capture.app()) as url:
        yield url, capture


async def test_unknown_fields_reach_the_replica_byte_for_byte(
    replica: tuple[str, Capture],
    make_gateway: Any,
) -> None:
    url, capture = replica
    raw = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"top_k":7,"x_v":{"a":1}}'
    async with (
        make_gateway(replicas=[url], replica_api_key="replica-secret") as (gw, _),
        httpx.AsyncClient() as http,
    ):
        resp = await http.post(
            gw + "/v1/chat/completions",
            content=raw,
            headers={"authorization": "Bearer client-key", "content-type": "application/json"},
        )
    assert resp.status_code == 200 and resp.headers["x-deja-cache"] == "miss"
    # the client's bytes, with only the tenant's vLLM cache_salt spliced in front
    salted = b'{"cache_salt":"' + tenant_salt("default").encode() + b'",' + raw[1:]
    assert capture.bodies == [salted]
    assert capture.auth == ["Bearer replica-secret"]  # the client's key never travels upstream
    assert capture.prefix == [None]  # no system prompt, no tools: no prefix key


async def test_the_prefix_key_travels_to_the_replica(
    replica: tuple[str, Capture], make_gateway: Any
) -> None:
    url, capture = replica
    body = {
        "model": "m",
        "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "q"}],
    }
    async with make_gateway(replicas=[url]) as (gw, _), httpx.AsyncClient() as http:
        resp = await http.post(gw + "/v1/chat/completions", json=body)
        await http.post(
            gw + "/v1/chat/completions",
            json=body,
            headers={"x-prefix-hash": "doc-42", "cache-control": "no-cache"},
        )
    assert capture.prefix == [resp.headers["x-prefix-hash"], "doc-42"]


async def test_stream_asks_upstream_for_usage_only_when_it_may_store(
    replica: tuple[str, Capture],
    make_gateway: Any,
) -> None:
    url, capture = replica
    req = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with make_gateway(replicas=[url]) as (gw, _), httpx.AsyncClient() as http:
        await http.post(gw + "/v1/chat/completions", json=req)
        await http.post(
            gw + "/v1/chat/completions", json=req, headers={"cache-control": "no-store"}
        )
    assert orjson.loads(capture.bodies[0])["stream_options"] == {"include_usage": True}
    assert "stream_options" not in orjson.loads(capture.bodies[1])
