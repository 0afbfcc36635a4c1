"""The model-as-judge against a real simulated replica over HTTP, through the real upstream path.

The simulator answers by its documented word-overlap rule (``sim.judge``); these tests check
the mechanics (one call, one token, counting, the remembered verdict), not a model's judgement.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from contextlib import AsyncExitStack
from typing import Any

import orjson
import pytest

from deja.chat.judge import judge_messages
from deja.observability.metrics import Metrics
from deja.semantic.judge import JUDGE_PATH, Judge
from deja.upstream.discovery import ModelDiscovery
from deja.upstream.pool import ReplicaPool
from deja.upstream.router import Router
from deja.upstream.upstream import Upstream, build_session
from sim.config import SimConfig
from sim.runner import start_simulators

pytestmark = pytest.mark.integration

MODEL = "deja-sim-1"
SAME = ("How do I sort a list in Python?", "how do i sort a python list")
DIFFERENT = ("How do I sort a list in Python?", "Who wrote the play Hamlet?")


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[Upstream, Metrics]]:
    """A real ``Upstream`` over one simulated replica, as ``app.wiring.replicas`` builds it."""
    async with AsyncExitStack() as stack:
        sims = await start_simulators(1, SimConfig(speed=0))
        stack.push_async_callback(sims.stop)
        http = build_session(connect_timeout=2.0, read_timeout=10.0, max_connections=16)
        stack.push_async_callback(http.close)
        pool = ReplicaPool(sims.urls, cooldown=5.0, scrape_interval=15.0, simulated=True)
        metrics = Metrics()
        metrics.watch_replicas(pool.samples)
        router = Router(pool, "prefix", 0.25)
        await ModelDiscovery(pool, http, timeout=5.0).refresh()
        assert MODEL in pool.known_models()
        yield Upstream(router, http, None, metrics), metrics


def judge_calls(metrics: Metrics, mode: str, verdict: str) -> float:
    return metrics.judge_calls.labels(mode, verdict)._value.get()  # type: ignore[no-any-return]


def judge_tokens(metrics: Metrics) -> float:
    return metrics.judge_tokens._value.get()  # type: ignore[no-any-return]


async def test_sync_verdicts_follow_the_sim_rule_and_are_counted(
    upstream: tuple[Upstream, Metrics],
) -> None:
    up, metrics = upstream
    judge = Judge(up, metrics, mode="sync", timeout=5.0)
    assert await judge.verdict(*SAME, MODEL) is True
    assert await judge.verdict(*DIFFERENT, MODEL) is False
    assert judge.calls == 2
    assert judge.tokens > 2  # prompt tokens plus one completion token per call
    assert judge_calls(metrics, "sync", "yes") == 1
    assert judge_calls(metrics, "sync", "no") == 1
    assert judge_tokens(metrics) == judge.tokens
    assert judge.known(*SAME, MODEL) is True
    assert judge.known(*DIFFERENT, MODEL) is False


async def test_an_unknown_model_is_no_verdict(upstream: tuple[Upstream, Metrics]) -> None:
    up, metrics = upstream
    judge = Judge(up, metrics, mode="sync", timeout=5.0)
    assert await judge.verdict(*SAME, "no-such-model") is None
    assert judge_calls(metrics, "sync", "error") == 1


async def test_async_mode_judges_in_the_background(upstream: tuple[Upstream, Metrics]) -> None:
    up, metrics = upstream
    judge = Judge(up, metrics, mode="async", timeout=5.0)
    tasks: list[asyncio.Task[None]] = []

    def spawn(job: Coroutine[Any, Any, None]) -> None:
        tasks.append(asyncio.create_task(job))

    judge.judge_later(*SAME, MODEL, spawn)
    judge.judge_later(*SAME, MODEL, spawn)  # pending: not asked twice
    judge.judge_later(*DIFFERENT, MODEL, spawn)
    # nothing is decided yet: the caller serves a miss now
    assert judge.known(*SAME, MODEL) is None
    assert len(tasks) == 2
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)
    assert judge.known(*SAME, MODEL) is True
    assert judge.known(*DIFFERENT, MODEL) is False
    assert judge.calls == 2 and judge.tokens > 2
    assert judge_calls(metrics, "async", "yes") == 1
    assert judge_calls(metrics, "async", "no") == 1
    assert judge_tokens(metrics) == judge.tokens
    judge.judge_later(*SAME, MODEL, spawn)  # known now: no call
    assert len(tasks) == 2


async def test_the_sim_answers_a_judge_request_with_one_token(
    upstream: tuple[Upstream, Metrics],
) -> None:
    up, _ = upstream
    body = {"model": MODEL, "messages": judge_messages(*SAME), "max_tokens": 1, "temperature": 0}
    reply = await up.complete(JUDGE_PATH, orjson.dumps(body), MODEL, None)
    answer = orjson.loads(reply.body)
    choice = answer["choices"][0]
    assert choice["message"]["content"] == "yes"
    assert choice["finish_reason"] == "length"
    assert answer["usage"]["completion_tokens"] == 1
    assert answer["usage"]["prompt_tokens"] > 0
