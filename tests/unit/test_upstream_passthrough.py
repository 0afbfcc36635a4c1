"""What the gateway sends upstream, seen through a fake transport (httpx.MockTransport)."""

from __future__ import annotations

import httpx
import orjson
from starlette.testclient import TestClient

from app.main import create_app
from config.settings import Settings

MODELS = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "x"}]}


def test_unknown_fields_reach_the_replica_byte_for_byte() -> None:
    seen: list[httpx.Request] = []

    def replica(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json=MODELS)
        seen.append(request)
        answer = {
            "id": "x",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "ok"},
                    "finish_reason": "stop",
                }
            ],
        }
        return httpx.Response(200, json=answer)

    app = create_app(
        Settings(replicas=["http://replica:8000"]), transport=httpx.MockTransport(replica)
    )
    raw = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"top_k":7,"x_vendor":{"a":1}}'
    with TestClient(app) as client:
        resp = client.post(
            "/v1/chat/completions", content=raw, headers={"authorization": "Bearer client-key"}
        )
    assert resp.status_code == 200 and resp.headers["x-deja-cache"] == "miss"
    assert seen[0].content == raw
    assert "client-key" not in seen[0].headers.get("authorization", "")


def test_stream_asks_upstream_for_usage_only_when_it_may_store() -> None:
    bodies: list[bytes] = []

    def replica(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json=MODELS)
        bodies.append(request.content)
        return httpx.Response(
            200,
            stream=httpx.ByteStream(b"data: [DONE]\n\n"),
            headers={"content-type": "text/event-stream"},
        )

    app = create_app(
        Settings(replicas=["http://replica:8000"]), transport=httpx.MockTransport(replica)
    )
    req = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with TestClient(app) as client:
        client.post("/v1/chat/completions", json=req)
        client.post("/v1/chat/completions", json=req, headers={"cache-control": "no-store"})
    assert orjson.loads(bodies[0])["stream_options"] == {"include_usage": True}
    assert "stream_options" not in orjson.loads(bodies[1])
