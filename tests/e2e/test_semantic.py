"""The semantic layer end to end: the official openai client, a real gateway with the ONNX
embedder and Qdrant Edge (and the server implementation on qdrant-client's local mode), and
simulated replicas whose deterministic answers prove which question an answer belongs to."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from deja.errors import VectorStoreError
from sim.config import SimConfig
from sim.engine import answer_digest, render_chat
from sim.runner import SimCluster, start_simulators
from tests.support import SIM_MODEL

pytestmark = pytest.mark.e2e

OTHER_MODEL = "deja-sim-2"
ORIGINAL = "How do I reset my password?"
PARAPHRASE = "How can I reset my password?"  # the verifier accepts it at the default target


@pytest.fixture(scope="module")
async def replicas(sims: SimCluster) -> AsyncIterator[list[str]]:
    other = await start_simulators(1, SimConfig(speed=0, model=OTHER_MODEL))
    try:
        yield [*sims.urls, *other.urls]
    finally:
        await other.stop()


class Env:
    def __init__(self, url: str, app: Any) -> None:
        self.app = app
        self.client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0)

    async def ask(
        self,
        question: str,
        *,
        system: str = "You are helpful.",
        model: str = SIM_MODEL,
        headers: dict[str, str] | None = None,
        **params: Any,
    ) -> tuple[Any, str, list[dict[str, str]]]:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
        raw = await self.client.chat.completions.with_raw_response.create(
            model=model, messages=messages, extra_headers=headers or {}, **params
        )
        await self.app.state.gateway.pipeline.drain()
        return raw.headers, raw.parse().choices[0].message.content or "", messages


@pytest.fixture(scope="module", params=["edge", "qdrant-local"])
async def env(
    request: pytest.FixtureRequest, replicas: list[str], make_gateway: Any
) -> AsyncIterator[Env]:
    extra = {"qdrant_url": ":memory:"} if request.param == "qdrant-local" else {}
    # The shipped verifier and calibration decide; no shadow re-asks (they would add upstream
    # calls that some tests count).
    async with make_gateway(
        replicas=replicas, semantic_enabled=True, semantic_shadow_rate=0.0, **extra
    ) as (url, app):
        yield Env(url, app)


def unique_system() -> str:
    """Each test gets its own conversation scope, so tests cannot hit each other's entries."""
    return f"You are helpful. Session {uuid.uuid4().hex}."


async def test_paraphrase_is_answered_with_the_original_answer(env: Env) -> None:
    system = unique_system()
    first, first_text, first_messages = await env.ask(ORIGINAL, system=system)
    second, second_text, second_messages = await env.ask(PARAPHRASE, system=system)
    assert first["x-deja-cache"] == "miss"
    assert second["x-deja-cache"] == "semantic"
    assert second["x-deja-entry"] == first["x-deja-entry"]
    assert float(second["x-deja-similarity"]) >= env.app.state.gateway.thresholds.global_
    assert 0.0 < float(second["x-deja-verifier-score"]) <= 1.0
    assert answer_digest(render_chat(first_messages)) in second_text  # the original's answer
    assert answer_digest(render_chat(second_messages)) not in second_text
    assert second_text == first_text


async def test_unrelated_question_misses_and_reports_its_best_score(env: Env) -> None:
    system = unique_system()
    await env.ask(ORIGINAL, system=system)
    headers, _, _ = await env.ask("What is the capital of France?", system=system)
    assert headers["x-deja-cache"] == "miss"
    assert float(headers["x-deja-similarity"]) < 0.9


async def test_no_hit_across_system_prompts_models_or_temperatures(env: Env) -> None:
    system = unique_system()
    await env.ask(ORIGINAL, system=system)
    other_system, _, _ = await env.ask(PARAPHRASE, system=unique_system())
    other_model, _, _ = await env.ask(PARAPHRASE, system=system, model=OTHER_MODEL)
    other_temp, _, _ = await env.ask(PARAPHRASE, system=system, temperature=0.2)
    outcomes = [h["x-deja-cache"] for h in (other_system, other_model, other_temp)]
    assert outcomes == ["miss", "miss", "miss"]
    same, _, _ = await env.ask(PARAPHRASE, system=system)
    assert same["x-deja-cache"] == "semantic"  # control: the scope that should hit does


async def test_follow_up_only_hits_inside_the_same_conversation(env: Env) -> None:
    def convo(topic: str) -> list[dict[str, str]]:
        return [
            {"role": "user", "content": f"List three {topic}."},
            {"role": "assistant", "content": "1. a 2. b 3. c"},
            {"role": "user", "content": "And the second one?"},
        ]

    async def ask(messages: list[dict[str, str]]) -> str:
        raw = await env.client.chat.completions.with_raw_response.create(
            model=SIM_MODEL, messages=messages
        )
        await env.app.state.gateway.pipeline.drain()
        return raw.headers["x-deja-cache"]

    topic = uuid.uuid4().hex
    assert await ask(convo(f"databases {topic}")) == "miss"
    assert await ask(convo(f"rivers {topic}")) == "miss"  # same words, other conversation
    # The same follow-up up to case and punctuation hits inside the same conversation only.
    paraphrased = convo(f"databases {topic}")
    paraphrased[-1]["content"] = "and the second one"
    assert await ask(paraphrased) == "semantic"
    elsewhere = convo(f"lakes {topic}")
    elsewhere[-1]["content"] = "and the second one"
    assert await ask(elsewhere) == "miss"


async def test_temporal_questions_bypass_both_layers(env: Env) -> None:
    system = unique_system()
    for _ in range(2):
        headers, _, _ = await env.ask("What changed in the latest release?", system=system)
        assert headers["x-deja-cache"] == "bypass"
        assert headers["x-deja-bypass"] == "temporal"
        assert "x-deja-replica" in headers
    spanish, _, _ = await env.ask("¿Qué tiempo hace hoy en Madrid?", system=system)
    assert spanish["x-deja-cache"] == "bypass"


async def test_short_ttl_expires_in_both_layers(env: Env) -> None:
    system = unique_system()
    await env.ask(ORIGINAL, system=system, headers={"X-Deja-TTL": "1"})
    hit, _, _ = await env.ask(PARAPHRASE, system=system)
    assert hit["x-deja-cache"] == "semantic"
    await asyncio.sleep(1.2)
    paraphrase, _, _ = await env.ask(PARAPHRASE, system=system)
    assert paraphrase["x-deja-cache"] == "miss"  # the expired point is filtered in the search


async def test_stricter_threshold_header_and_max_age(env: Env) -> None:
    system = unique_system()
    await env.ask(ORIGINAL, system=system)
    strict, _, _ = await env.ask(PARAPHRASE, system=system, headers={"X-Deja-Threshold": "0.999"})
    assert strict["x-deja-cache"] == "miss"
    loose, _, _ = await env.ask(PARAPHRASE, system=system, headers={"X-Deja-Threshold": "0.1"})
    assert loose["x-deja-cache"] in {"semantic", "exact"}  # never looser than configured
    await asyncio.sleep(1.1)
    aged, _, _ = await env.ask(PARAPHRASE, system=system, headers={"Cache-Control": "max-age=1"})
    assert aged["x-deja-cache"] == "miss"


async def test_streamed_semantic_hit(env: Env) -> None:
    system = unique_system()
    _, original_text, _ = await env.ask(ORIGINAL, system=system)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": PARAPHRASE}]
    raw = await env.client.chat.completions.with_raw_response.create(
        model=SIM_MODEL, messages=messages, stream=True
    )
    chunks = [c async for c in raw.parse()]
    assert raw.headers["x-deja-cache"] == "semantic"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == original_text


async def test_empty_or_tool_only_last_messages_skip_the_layer(env: Env) -> None:
    for messages in (
        [{"role": "user", "content": "   "}],
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}],
        [
            {"role": "user", "content": "call the tool"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
        ],
    ):
        raw = await env.client.chat.completions.with_raw_response.create(
            model=SIM_MODEL,
            messages=messages,  # type: ignore[arg-type]
        )
        assert raw.headers["x-deja-cache"] == "miss"
        assert "x-deja-similarity" not in raw.headers


class BrokenStore:
    """Wraps the real store; fails every call while ``broken`` is set (a failure-path fake)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.broken = True

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.broken:
                raise VectorStoreError("vector store is down (test)")
            return await attr(*args, **kwargs)

        return call


async def test_broken_vector_store_mid_run_serves_misses_then_recovers(env: Env) -> None:
    semantic = env.app.state.gateway.semantic
    system = unique_system()
    await env.ask(ORIGINAL, system=system)
    real = semantic.store
    broken = BrokenStore(real)
    semantic.store = broken
    try:
        headers, text, _ = await env.ask(PARAPHRASE, system=system)
        assert headers["x-deja-cache"] == "miss" and text  # served by the replica
        broken.broken = False
        headers, _, _ = await env.ask(PARAPHRASE + " Please.", system=system)
        assert headers["x-deja-cache"] in {"semantic", "miss"}
        again, _, _ = await env.ask(ORIGINAL.replace("?", " ?"), system=system)
        assert again["x-deja-cache"] == "semantic"  # the layer answers again by itself
    finally:
        semantic.store = real
