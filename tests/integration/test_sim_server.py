"""Integration tests of the simulated vLLM replica over real sockets (uvicorn in-loop)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator

import httpx
import openai
import orjson
import pytest
from openai.types.chat import ChatCompletionMessageParam

from deja.upstream.health import parse_vllm_metrics
from sim.config import SimConfig
from sim.engine import ANSWER_PREFIX, answer_digest, answer_text, generate, render_chat
from sim.runner import SimCluster, start_simulators

pytestmark = pytest.mark.integration

MODEL = "deja-sim-1"
MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is the capital of France?"},
]


@pytest.fixture(scope="module")
async def sims() -> AsyncIterator[SimCluster]:
    cluster = await start_simulators(2, SimConfig(speed=0))
    yield cluster
    await cluster.stop()


@pytest.fixture(scope="module")
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=5.0) as client:
        yield client


@pytest.fixture
async def oai(sims: SimCluster) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(base_url=sims.urls[0] + "/v1", api_key="x", max_retries=0)
    yield client
    await client.close()


def metric_value(text: str, name: str) -> float:
    """Sum of the samples of ``name`` (exact sample name) in Prometheus text."""
    pattern = re.compile(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$", re.MULTILINE)
    values = [float(v) for v in pattern.findall(text)]
    assert values, f"{name} not exposed"
    return sum(values)


def sse_events(body: str) -> list[str]:
    assert body.endswith("data: [DONE]\n\n")
    events = body.split("\n\n")
    assert events[-1] == ""
    assert all(e.startswith("data: ") for e in events[:-1])
    return [e[len("data: ") :] for e in events[:-1]]


async def test_models_health_and_replica_names(sims: SimCluster, http: httpx.AsyncClient) -> None:
    assert len(sims.urls) == 2 and sims.urls[0] != sims.urls[1]
    for i, url in enumerate(sims.urls):
        models = await http.get(url + "/v1/models")
        assert models.status_code == 200
        assert models.headers["x-sim-replica"] == f"sim-{i}"
        [card] = models.json()["data"]
        assert card["id"] == MODEL and card["object"] == "model"
        assert "simulated" in card["owned_by"] and card["max_model_len"] == 8192
        health = await http.get(url + "/health")
        assert health.status_code == 200 and "simulated" in health.text


async def test_chat_non_stream_openai(sims: SimCluster, oai: openai.AsyncOpenAI) -> None:
    resp = await oai.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert resp.id.startswith("chatcmpl-") and resp.object == "chat.completion"
    [choice] = resp.choices
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    expected = answer_text(render_chat(MESSAGES))
    assert choice.message.content == expected
    assert expected.startswith(f"{ANSWER_PREFIX}{answer_digest(render_chat(MESSAGES))}: ")
    assert resp.usage is not None
    assert resp.usage.completion_tokens == len(expected.split())
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens

    short = await oai.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_completion_tokens=3,
    )
    assert short.choices[0].finish_reason == "length"
    assert short.usage is not None and short.usage.completion_tokens == 3


async def test_chat_stream_openai_with_usage(sims: SimCluster, oai: openai.AsyncOpenAI) -> None:
    stream = await oai.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[0].object == "chat.completion.chunk"
    assert chunks[0].choices[0].delta.role == "assistant"
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == answer_text(render_chat(MESSAGES))
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == len(content.split())
    assert len({c.id for c in chunks}) == 1


async def test_chat_stream_raw_sse(sims: SimCluster, http: httpx.AsyncClient) -> None:
    payload = {"model": MODEL, "messages": MESSAGES, "stream": True, "max_tokens": 4}
    resp = await http.post(sims.urls[1] + "/v1/chat/completions", json=payload)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert resp.headers["x-sim-replica"] == "sim-1"
    events = sse_events(resp.text)
    assert events[-1] == "[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    pieces = [c["choices"][0]["delta"]["content"] for c in chunks[1:-1]]
    assert pieces == generate(render_chat(MESSAGES), 4).pieces
    assert chunks[-1]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "length",
    }
    assert all("usage" not in c for c in chunks)  # no include_usage, no usage chunk


async def test_completions_openai(sims: SimCluster, oai: openai.AsyncOpenAI) -> None:
    prompt = "Once upon a time"
    resp = await oai.completions.create(model=MODEL, prompt=prompt)
    assert resp.id.startswith("cmpl-") and resp.object == "text_completion"
    assert resp.choices[0].text == answer_text(prompt)
    assert resp.choices[0].finish_reason == "stop"
    stream = await oai.completions.create(
        model=MODEL,
        prompt=prompt,
        max_tokens=5,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == " ".join(answer_text(prompt).split()[:5])
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5


async def test_n_choices(sims: SimCluster, http: httpx.AsyncClient) -> None:
    payload = {"model": MODEL, "messages": MESSAGES, "n": 3}
    body = (await http.post(sims.urls[0] + "/v1/chat/completions", json=payload)).json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert len({c["message"]["content"] for c in body["choices"]}) == 1
    assert body["usage"]["completion_tokens"] == 3 * len(answer_text(render_chat(MESSAGES)).split())


async def test_errors(sims: SimCluster, http: httpx.AsyncClient, oai: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        await oai.chat.completions.create(model="nope", messages=MESSAGES)
    resp = await http.post(sims.urls[0] + "/v1/completions", json={"model": "nope", "prompt": "x"})
    assert resp.status_code == 404
    assert resp.json() == {
        "error": {
            "message": resp.json()["error"]["message"],
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
    }
    bad = await http.post(sims.urls[0] + "/v1/chat/completions", content=b"{not json")
    assert bad.status_code == 400
    assert set(bad.json()["error"]) == {"message", "type", "param", "code"}
    too_long = {"model": MODEL, "prompt": "x", "max_tokens": 10**6}
    assert (await http.post(sims.urls[0] + "/v1/completions", json=too_long)).status_code == 400


async def test_metrics_and_prefix_cache_hits(sims: SimCluster, http: httpx.AsyncClient) -> None:
    url = sims.urls[1]
    prompt = " ".join(f"word{i}" for i in range(200))  # 200 tokens: 12 full blocks
    payload = {"model": MODEL, "prompt": prompt, "max_tokens": 2}
    first = await http.post(url + "/v1/completions", json=payload)
    second = await http.post(url + "/v1/completions", json=payload)
    assert first.headers["x-sim-cached-tokens"] == "0"
    assert second.headers["x-sim-cached-tokens"] == str(12 * 16)
    assert second.json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 192}

    resp = await http.get(url + "/metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    text = resp.text
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:num_preemptions_total",
        "vllm:generation_tokens_total",
        "vllm:prompt_tokens_total",
        "vllm:time_to_first_token_seconds_count",
        "vllm:time_per_output_token_seconds_count",
        "vllm:request_queue_time_seconds_count",
        "vllm:request_prefill_time_seconds_count",
    ):
        assert re.search(rf'^{re.escape(name)}\{{model_name="{MODEL}"\}} ', text, re.MULTILINE)
    assert metric_value(text, "vllm:prefix_cache_hits_total") >= 192
    info = parse_vllm_metrics(text, 1.0)  # vLLM's cache_config_info: the cache's size
    assert info.num_gpu_blocks is not None and info.num_gpu_blocks > 0
    assert 'enable_prefix_caching="True"' in text and 'block_size="16"' in text
    assert metric_value(text, "vllm:prefix_cache_queries_total") >= 400
    assert metric_value(text, "vllm:prompt_tokens_total") >= 400
    assert metric_value(text, "vllm:generation_tokens_total") >= 4
    assert metric_value(text, "vllm:num_requests_running") == 0
    assert metric_value(text, "vllm:kv_cache_usage_perc") == 0
    assert metric_value(text, "vllm:time_to_first_token_seconds_count") >= 2
    assert metric_value(text, "vllm:request_prefill_time_seconds_count") >= 2

    # Each replica has its own registry: sim-0 never saw this prompt.
    other = (await http.get(sims.urls[0] + "/metrics")).text
    assert metric_value(other, "vllm:prefix_cache_hits_total") < 192


async def test_fault_injection_error_rate(
    sims: SimCluster, http: httpx.AsyncClient, oai: openai.AsyncOpenAI
) -> None:
    url = sims.urls[0]
    faults = url + "/sim/faults"
    assert (await http.get(faults)).json() == {
        "error_rate": 0.0,
        "error_status": 500,
        "added_latency_ms": 0.0,
        "stall_ms": 0.0,
        "kv_events_drop": 0,
        "kv_events_paused": False,
    }
    assert (await http.put(faults, json={"error_rate": 2})).status_code == 400
    try:
        updated = (await http.put(faults, json={"error_rate": 1})).json()
        assert updated["error_rate"] == 1 and updated["error_status"] == 500
        payload = {"model": MODEL, "messages": MESSAGES}
        resp = await http.post(url + "/v1/chat/completions", json=payload)
        assert resp.status_code == 500 and "injected" in resp.json()["error"]["message"]
        with pytest.raises(openai.InternalServerError):
            await oai.chat.completions.create(model=MODEL, messages=MESSAGES)
        await http.put(faults, json={"error_status": 503})
        resp = await http.post(url + "/v1/completions", json={"model": MODEL, "prompt": "x"})
        assert resp.status_code == 503
        # The other replica is unaffected.
        other = await http.post(sims.urls[1] + "/v1/chat/completions", json=payload)
        assert other.status_code == 200
    finally:
        await http.put(faults, json={"error_rate": 0, "error_status": 500})
    resp = await http.post(url + "/v1/chat/completions", json=payload)
    assert resp.status_code == 200


async def test_fault_injection_stall_times_out(sims: SimCluster, http: httpx.AsyncClient) -> None:
    url = sims.urls[0]
    await http.put(url + "/sim/faults", json={"stall_ms": 3000})
    try:
        payload = {"model": MODEL, "messages": MESSAGES, "stream": True}
        with pytest.raises(httpx.ReadTimeout):
            await http.post(url + "/v1/chat/completions", json=payload, timeout=0.2)
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=0.2)
        async with client:
            with pytest.raises(openai.APITimeoutError):
                await client.completions.create(model=MODEL, prompt="x")
    finally:
        await http.put(url + "/sim/faults", json={"stall_ms": 0})
    start = time.perf_counter()
    resp = await http.post(url + "/v1/completions", json={"model": MODEL, "prompt": "x"})
    assert resp.status_code == 200 and time.perf_counter() - start < 1.0


@pytest.fixture(scope="module")
async def slow_sim() -> AsyncIterator[SimCluster]:
    config = SimConfig(
        max_num_seqs=1, base_ttft_ms=100, prefill_ms_per_token=0, decode_ms_per_token=5
    )
    cluster = await start_simulators(1, config)
    yield cluster
    await cluster.stop()


async def test_max_num_seqs_queues_requests(slow_sim: SimCluster, http: httpx.AsyncClient) -> None:
    url = slow_sim.urls[0]
    payload = {"model": MODEL, "prompt": "queue me", "max_tokens": 1}  # ~0.1 s each
    start = time.perf_counter()
    requests = [
        asyncio.create_task(http.post(url + "/v1/completions", json=payload)) for _ in range(3)
    ]
    await asyncio.sleep(0.05)
    text = (await http.get(url + "/metrics")).text
    assert metric_value(text, "vllm:num_requests_running") == 1
    assert metric_value(text, "vllm:num_requests_waiting") == 2
    assert metric_value(text, "vllm:kv_cache_usage_perc") > 0
    responses = await asyncio.gather(*requests)
    assert all(r.status_code == 200 for r in responses)
    assert time.perf_counter() - start >= 0.3  # served one after another
    text = (await http.get(url + "/metrics")).text
    assert metric_value(text, "vllm:num_requests_running") == 0
    assert metric_value(text, "vllm:num_requests_waiting") == 0


async def test_disconnect_mid_stream_frees_the_slot(
    slow_sim: SimCluster, http: httpx.AsyncClient
) -> None:
    url = slow_sim.urls[0]
    slow = {"model": MODEL, "prompt": "a long story", "stream": True}
    async with http.stream("POST", url + "/v1/completions", json=slow) as resp:
        async for line in resp.aiter_lines():
            if line.startswith("data: "):
                break  # got the first token; hang up mid-stream
    deadline = time.perf_counter() + 1.0
    while True:
        text = (await http.get(url + "/metrics")).text
        if metric_value(text, "vllm:num_requests_running") == 0:
            break
        assert time.perf_counter() < deadline, "running count not released after disconnect"
        await asyncio.sleep(0.01)
    resp = await http.post(url + "/v1/completions", json={"model": MODEL, "prompt": "next"})
    assert resp.status_code == 200
