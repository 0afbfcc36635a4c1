"""The model-as-judge client without replicas: prompt shape, parsing, the verdict cache,
background de-duplication, and failures that become "no verdict"."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, cast

import orjson
import pytest

from deja.chat.judge import JUDGE_MARKER, JUDGE_SYSTEM_PROMPT, judge_messages
from deja.errors import UpstreamServerError, UpstreamTimeoutError
from deja.observability.metrics import Metrics
from deja.semantic.judge import JUDGE_PATH, Judge, JudgeMode, parse_verdict
from deja.upstream.upstream import Upstream
from sim.judge import jaccard, judge_answer, judge_generation

MODEL = "deja-sim-1"


class FakeReply:
    def __init__(self, body: bytes) -> None:
        self.body = body


class FakeUpstream:
    """Answers every judge call with ``content`` (or raises ``error``, or sleeps ``delay``)."""

    def __init__(
        self,
        content: str | None = "yes",
        *,
        error: Exception | None = None,
        delay: float = 0.0,
        usage: dict[str, Any] | None = None,
    ) -> None:
        self.content = content
        self.error = error
        self.delay = delay
        self.usage = usage if usage is not None else {"prompt_tokens": 40, "completion_tokens": 1}
        self.requests: list[dict[str, Any]] = []

    async def complete(
        self, path: str, body: bytes, model: str, prefix_key: str | None
    ) -> FakeReply:
        assert path == JUDGE_PATH
        assert prefix_key is None
        self.requests.append(orjson.loads(body))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.error is not None:
            raise self.error
        message = {"role": "assistant", "content": self.content}
        return FakeReply(orjson.dumps({"choices": [{"message": message}], "usage": self.usage}))


def make(upstream: FakeUpstream, mode: JudgeMode = "sync", **kwargs: Any) -> tuple[Judge, Metrics]:
    metrics = Metrics()
    judge = Judge(cast(Upstream, upstream), metrics, mode=mode, timeout=1.0, **kwargs)
    return judge, metrics


def calls(metrics: Metrics, mode: str, verdict: str) -> float:
    return metrics.judge_calls.labels(mode, verdict)._value.get()  # type: ignore[no-any-return]


def tokens(metrics: Metrics) -> float:
    return metrics.judge_tokens._value.get()  # type: ignore[no-any-return]


def test_the_prompt_is_constant_and_carries_both_questions() -> None:
    messages = judge_messages("What is  DNS?\nShort please", "what is dns")
    assert messages[0] == {"role": "system", "content": JUDGE_SYSTEM_PROMPT}
    assert messages[1] == {
        "role": "user",
        "content": "Question A: What is DNS? Short please\nQuestion B: what is dns",
    }
    # the simulator recognises it by the same first sentence
    assert JUDGE_SYSTEM_PROMPT.startswith(JUDGE_MARKER)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("yes", True),
        ("Yes.", True),
        (" YES, they do", True),
        ("y", True),
        ("Sí", True),
        ("si", True),
        ("true", True),
        ("no", False),
        ("No.", False),
        ("N", False),
        ("False", False),
        ("maybe", None),
        ("", None),
        ("...", None),
        ("yesterday", None),
    ],
)
def test_parse_verdict(content: str, expected: bool | None) -> None:
    assert parse_verdict(content) is expected


async def test_a_sync_verdict_is_one_call_counted_and_remembered() -> None:
    upstream = FakeUpstream("Yes")
    judge, metrics = make(upstream)
    assert judge.known("What is DNS?", "what is  dns?", MODEL) is None
    assert await judge.verdict("What is DNS?", "what is  dns?", MODEL) is True
    request = upstream.requests[0]
    assert request["max_tokens"] == 1 and request["temperature"] == 0
    assert request["model"] == MODEL
    assert request["messages"] == judge_messages("What is DNS?", "what is  dns?")
    assert (judge.calls, judge.tokens) == (1, 41)
    assert calls(metrics, "sync", "yes") == 1
    assert tokens(metrics) == 41
    # case and whitespace do not matter; another model does
    assert judge.known("what is dns?", "WHAT IS DNS?", MODEL) is True
    assert judge.known("What is DNS?", "what is dns?", "other-model") is None
    assert judge.known("what is dns?", "what is http?", MODEL) is None


async def test_no_and_unclear_answers() -> None:
    judge, metrics = make(FakeUpstream("no"))
    assert await judge.verdict("a", "b", MODEL) is False
    assert judge.known("a", "b", MODEL) is False
    assert calls(metrics, "sync", "no") == 1

    judge, metrics = make(FakeUpstream("perhaps", usage={}))
    assert await judge.verdict("a", "b", MODEL) is None
    assert judge.known("a", "b", MODEL) is None  # no verdict is not remembered
    assert calls(metrics, "sync", "unclear") == 1
    assert (judge.calls, judge.tokens) == (1, 0)

    judge, metrics = make(FakeUpstream(None))  # no content at all
    assert await judge.verdict("a", "b", MODEL) is None
    assert calls(metrics, "sync", "unclear") == 1


@pytest.mark.parametrize(
    "error",
    [
        UpstreamServerError("replica r1 failed with 500: boom", replica_status=500),
        UpstreamTimeoutError("replica r1 stalled"),
    ],
)
async def test_replica_errors_are_no_verdict(error: Exception) -> None:
    judge, metrics = make(FakeUpstream(error=error))
    assert await judge.verdict("a", "b", MODEL) is None
    assert judge.known("a", "b", MODEL) is None
    assert calls(metrics, "sync", "error") == 1
    assert (judge.calls, judge.tokens) == (1, 0)


async def test_the_timeout_is_no_verdict() -> None:
    metrics = Metrics()
    upstream = FakeUpstream(delay=5.0)
    judge = Judge(cast(Upstream, upstream), metrics, mode="sync", timeout=0.05)
    assert await judge.verdict("a", "b", MODEL) is None
    assert calls(metrics, "sync", "error") == 1


async def test_mode_off_makes_no_call() -> None:
    upstream = FakeUpstream()
    judge, _ = make(upstream, mode="off")
    assert await judge.verdict("a", "b", MODEL) is None
    spawned: list[Coroutine[Any, Any, None]] = []
    judge.judge_later("a", "b", MODEL, spawned.append)
    assert not spawned and not upstream.requests and judge.calls == 0


async def test_the_verdict_cache_is_a_bounded_lru() -> None:
    judge, _ = make(FakeUpstream("yes"), cache_size=2)
    await judge.verdict("q1", "c", MODEL)
    await judge.verdict("q2", "c", MODEL)
    assert judge.known("q1", "c", MODEL) is True  # q1 is now the most recent
    await judge.verdict("q3", "c", MODEL)
    assert judge.known("q2", "c", MODEL) is None  # evicted
    assert judge.known("q1", "c", MODEL) is True
    assert judge.known("q3", "c", MODEL) is True


async def test_judge_later_spawns_once_per_pair_and_remembers() -> None:
    upstream = FakeUpstream("yes", delay=0.01)
    judge, metrics = make(upstream, mode="async")
    tasks: list[asyncio.Task[None]] = []

    def spawn(job: Coroutine[Any, Any, None]) -> None:
        tasks.append(asyncio.create_task(job))

    judge.judge_later("What is DNS?", "what is dns?", MODEL, spawn)
    judge.judge_later("what is DNS?", "What is DNS?", MODEL, spawn)  # same pair, pending
    assert len(tasks) == 1
    assert judge.known("What is DNS?", "what is dns?", MODEL) is None
    await asyncio.gather(*tasks)
    assert judge.known("What is DNS?", "what is dns?", MODEL) is True
    judge.judge_later("What is DNS?", "what is dns?", MODEL, spawn)  # known: nothing to do
    assert len(tasks) == 1
    assert len(upstream.requests) == 1
    assert calls(metrics, "async", "yes") == 1


async def test_judge_later_retries_after_no_verdict() -> None:
    upstream = FakeUpstream(error=UpstreamTimeoutError("stalled"))
    judge, _ = make(upstream, mode="async")
    tasks: list[asyncio.Task[None]] = []

    def spawn(job: Coroutine[Any, Any, None]) -> None:
        tasks.append(asyncio.create_task(job))

    judge.judge_later("a", "b", MODEL, spawn)
    await asyncio.gather(*tasks)
    judge.judge_later("a", "b", MODEL, spawn)  # no longer pending, still unknown
    await asyncio.gather(*tasks)
    assert len(tasks) == 2 and judge.calls == 2


async def test_a_failing_spawn_leaves_nothing_pending() -> None:
    judge, _ = make(FakeUpstream(), mode="async")

    def broken(job: Coroutine[Any, Any, None]) -> None:
        raise RuntimeError("no loop")

    with pytest.raises(RuntimeError):
        judge.judge_later("a", "b", MODEL, broken)
    spawned: list[Coroutine[Any, Any, None]] = []
    judge.judge_later("a", "b", MODEL, spawned.append)
    assert len(spawned) == 1
    await spawned[0]
    assert judge.known("a", "b", MODEL) is True


# ---------------------------------------------------------------- the simulator's rule


def test_sim_rule_is_word_set_jaccard() -> None:
    assert jaccard("What is DNS?", "what is dns") == 1.0
    assert jaccard("", "") == 0.0
    # {how, do, i, sort, a, list} vs {how, do, i, reverse, a, list}: 5/7 ≥ 0.6
    assert judge_answer("How do I sort a list", "how do I reverse a list") == "yes"
    assert judge_answer("What is DNS?", "Who wrote Hamlet?") == "no"


def test_sim_recognises_only_judge_requests() -> None:
    messages = judge_messages("What is DNS?", "what is DNS")
    one = judge_generation(messages, 1)
    assert one is not None and one.pieces == ["yes"] and one.finish_reason == "length"
    more = judge_generation(messages, None)
    assert more is not None and more.finish_reason == "stop"
    other = judge_generation(judge_messages("What is DNS?", "Who wrote Hamlet?"), 1)
    assert other is not None and other.text == "no"
    plain = [{"role": "system", "content": "You are helpful."}, messages[1]]
    assert judge_generation(plain, 1) is None
    assert judge_generation([messages[1]], 1) is None
    assert judge_generation("not a list", 1) is None
