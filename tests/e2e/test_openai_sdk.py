"""The official openai client against a running gateway and simulated replicas, all on real
sockets: misses then exact hits in every JSON/SSE combination, and errors as SDK exceptions."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest

from sim.engine import answer_digest, render_chat
from sim.runner import SimCluster
from tests.support import SIM_MODEL

pytestmark = pytest.mark.e2e


class SettlingClient(openai.AsyncOpenAI):
    """The official client, plus a wait for the gateway's background stores after each call,
    so that "the next identical request is a hit" does not race the store."""

    def __init__(self, base_url: str, app: Any) -> None:
        super().__init__(base_url=base_url, api_key="sk-test", max_retries=0)
        self._app = app

    async def settle(self) -> None:
        await self._app.state.gateway.pipeline.drain()


REDIS_FIXTURES = {"redis": "redis_node_url", "redis-cluster": "redis_cluster_url"}


@pytest.fixture(scope="module", params=["memory", "redis", "redis-cluster"])
async def gw_app(
    request: pytest.FixtureRequest, sims: SimCluster, make_gateway: Any
) -> AsyncIterator[tuple[str, Any]]:
    """The gateway with each exact-cache backend: in-process LRU, a real Redis, and a real
    local Redis Cluster."""
    extra = {}
    if request.param in REDIS_FIXTURES:
        extra["redis_url"] = request.getfixturevalue(REDIS_FIXTURES[request.param])
    async with make_gateway(replicas=sims.urls, **extra) as running:
        yield running


@pytest.fixture
def gw(gw_app: tuple[str, Any]) -> str:
    return gw_app[0]


@pytest.fixture
def client(gw_app: tuple[str, Any]) -> SettlingClient:
    return SettlingClient(gw_app[0] + "/v1", gw_app[1])


def question() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": f"What is deja? ({uuid.uuid4().hex})"},
    ]


def expected_digest(messages: list[dict[str, Any]]) -> str:
    return answer_digest(render_chat(messages))


async def ask(client: SettlingClient, messages: list[dict[str, Any]]) -> tuple[str, str, Any]:
    raw = await client.chat.completions.with_raw_response.create(model=SIM_MODEL, messages=messages)
    completion = raw.parse()
    await client.settle()
    return raw.headers["x-deja-cache"], completion.choices[0].message.content or "", completion


async def ask_stream(
    client: SettlingClient, messages: list[dict[str, Any]], include_usage: bool = False
) -> tuple[str, str, list[Any]]:
    kwargs: dict[str, Any] = {"stream_options": {"include_usage": True}} if include_usage else {}
    raw = await client.chat.completions.with_raw_response.create(
        model=SIM_MODEL, messages=messages, stream=True, **kwargs
    )
    chunks = [chunk async for chunk in raw.parse()]
    await client.settle()
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return raw.headers["x-deja-cache"], text, chunks


async def test_json_miss_then_json_hit(client: SettlingClient) -> None:
    messages = question()
    outcome1, text1, first = await ask(client, messages)
    outcome2, text2, second = await ask(client, messages)
    assert (outcome1, outcome2) == ("miss", "exact")
    assert expected_digest(messages) in text1 and "[simulated" in text1
    assert text2 == text1
    assert second.id != first.id
    assert (
        second.usage is not None and second.usage.completion_tokens == first.usage.completion_tokens
    )


async def test_stream_miss_then_stream_hit(client: SettlingClient) -> None:
    messages = question()
    outcome1, text1, miss_chunks = await ask_stream(client, messages)
    outcome2, text2, chunks = await ask_stream(client, messages, include_usage=True)
    assert (outcome1, outcome2) == ("miss", "exact")
    assert all(c.choices and c.usage is None for c in miss_chunks)  # usage not asked for
    assert expected_digest(messages) in text1 and text2 == text1
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert any(c.choices and c.choices[0].finish_reason == "stop" for c in chunks)


async def test_stream_miss_then_json_hit(client: SettlingClient) -> None:
    messages = question()
    outcome1, text1, _ = await ask_stream(client, messages)
    outcome2, text2, completion = await ask(client, messages)
    assert (outcome1, outcome2) == ("miss", "exact")
    assert text2 == text1 and completion.choices[0].finish_reason == "stop"


async def test_json_miss_then_stream_hit(client: SettlingClient) -> None:
    messages = question()
    outcome1, text1, _ = await ask(client, messages)
    outcome2, text2, chunks = await ask_stream(client, messages)
    assert (outcome1, outcome2) == ("miss", "exact")
    assert text2 == text1
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) >= 1


async def test_different_parameters_do_not_share_an_answer(client: SettlingClient) -> None:
    messages = question()
    await ask(client, messages)
    raw = await client.chat.completions.with_raw_response.create(
        model=SIM_MODEL, messages=messages, temperature=0.3
    )
    assert raw.headers["x-deja-cache"] == "miss"


async def test_completions_miss_then_hit_both_shapes(client: SettlingClient) -> None:
    prompt = f"Once upon a time {uuid.uuid4().hex}"
    raw1 = await client.completions.with_raw_response.create(model=SIM_MODEL, prompt=prompt)
    await client.settle()
    stream = await client.completions.with_raw_response.create(
        model=SIM_MODEL, prompt=prompt, stream=True
    )
    chunks = [c async for c in stream.parse()]
    assert (raw1.headers["x-deja-cache"], stream.headers["x-deja-cache"]) == ("miss", "exact")
    assert "".join(c.choices[0].text for c in chunks if c.choices) == raw1.parse().choices[0].text
    assert answer_digest(prompt) in raw1.parse().choices[0].text


async def test_cache_control_headers(client: SettlingClient) -> None:
    messages = question()
    no_store = {"Cache-Control": "no-store"}
    r1 = await client.chat.completions.with_raw_response.create(
        model=SIM_MODEL, messages=messages, extra_headers=no_store
    )
    await client.settle()
    r2 = await client.chat.completions.with_raw_response.create(model=SIM_MODEL, messages=messages)
    await client.settle()
    r3 = await client.chat.completions.with_raw_response.create(
        model=SIM_MODEL, messages=messages, extra_headers={"Cache-Control": "no-cache"}
    )
    await client.settle()
    r4 = await client.chat.completions.with_raw_response.create(model=SIM_MODEL, messages=messages)
    outcomes = [r.headers["x-deja-cache"] for r in (r1, r2, r3, r4)]
    assert outcomes == ["miss", "miss", "miss", "exact"]
    r5 = await client.chat.completions.with_raw_response.create(
        model=SIM_MODEL, messages=messages, extra_headers={"Cache-Control": "max-age=0"}
    )
    assert r5.headers["x-deja-cache"] in {"miss", "exact"}
    assert r4.headers["x-deja-entry"] == r2.headers["x-deja-entry"]


async def test_models_are_listed_and_labelled_simulated(client: SettlingClient) -> None:
    models = await client.models.list()
    assert [m.id for m in models.data] == [SIM_MODEL]
    assert "simulated" in models.data[0].owned_by


async def test_sdk_exception_classes(client: SettlingClient, gw: str) -> None:
    with pytest.raises(openai.NotFoundError) as not_found:
        await client.chat.completions.create(model="no-such-model", messages=question())
    assert not_found.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as bad:
        await client.chat.completions.create(model=SIM_MODEL, messages=[])
    assert bad.value.param == "messages"
    with pytest.raises(openai.BadRequestError) as bad_type:
        await client.chat.completions.create(
            model=SIM_MODEL, messages=question(), extra_body={"temperature": "hot"}
        )
    assert bad_type.value.param == "temperature"
    big = "x" * (4 * 1024 * 1024 + 10)
    with pytest.raises(openai.APIStatusError) as too_big:
        await client.chat.completions.create(
            model=SIM_MODEL, messages=[{"role": "user", "content": big}]
        )
    assert too_big.value.status_code == 413


async def test_malformed_json_and_unknown_path_are_openai_shaped(gw: str) -> None:
    async with httpx.AsyncClient(base_url=gw) as http:
        bad = await http.post(
            "/v1/chat/completions", content=b"{nope", headers={"content-type": "application/json"}
        )
        missing = await http.get("/v1/nothing-here")
        wrong_method = await http.get("/v1/chat/completions")
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    assert missing.status_code == 404 and set(missing.json()["error"]) == {
        "message",
        "type",
        "param",
        "code",
    }
    assert wrong_method.status_code == 405 and "error" in wrong_method.json()


async def test_health_and_readiness(gw: str) -> None:
    async with httpx.AsyncClient(base_url=gw) as http:
        assert (await http.get("/healthz")).status_code == 200
        ready = await http.get("/readyz")
    assert ready.status_code == 200
    # no replica addresses without the admin key: only how many can take a request
    assert ready.json()["replicas"] == {"total": 2, "available": 2}
    assert "127.0.0.1" not in ready.text
