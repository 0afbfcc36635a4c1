"""Shadow checks: sampling, the never-blocking hand-off, verdicts, failures, invalidation and the
in-process stats. The replica, embedder and vector store are fakes here (unit logic and failure
paths); tests/integration/test_shadow_sim.py runs the same checks against real replicas."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Coroutine
from typing import Any, cast

import orjson
import pytest

from deja.cache.entry import CachedAnswer
from deja.cache.exact.memory import MemoryExactStore
from deja.cache.keys import Endpoint
from deja.errors import CacheUnavailableError, EmbedderError, UpstreamServerError, VectorStoreError
from deja.observability.metrics import Metrics
from deja.request import CachePolicy, GatewayRequest
from deja.semantic.shadow import AnswerJudge, ShadowChecks, band
from deja.upstream.upstream import UpstreamReply

ENTRY = "e" * 64


def gateway_request(endpoint: Endpoint, body: dict[str, Any], tenant: str) -> GatewayRequest:
    stream = bool(body.get("stream"))
    return GatewayRequest(
        endpoint, body, orjson.dumps(body), "m", stream, stream, True, tenant, CachePolicy()
    )


def chat_request(*, tenant: str = "acme", stream: bool = True) -> GatewayRequest:
    question = {"role": "user", "content": "What is the capital of France?"}
    body: dict[str, Any] = {"model": "m", "messages": [question], "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return gateway_request("chat", body, tenant)


def answer(endpoint: Endpoint, content: str) -> CachedAnswer:
    if endpoint == "chat":
        return CachedAnswer(
            ENTRY, "chat", "m", "stop", 0.0, message={"role": "assistant", "content": content}
        )
    return CachedAnswer(ENTRY, "completion", "m", "stop", 0.0, text=content)


def chat_answer(content: str) -> CachedAnswer:
    return answer("chat", content)


def chat_reply(content: str) -> bytes:
    choice = {"index": 0, "message": {"role": "assistant", "content": content}}
    return orjson.dumps({"choices": [{**choice, "finish_reason": "stop"}]})


class FakeUpstream:
    """Answers with ``body``, or raises ``error``; waits for ``gate`` first when given."""

    def __init__(self, body: bytes = b"", error: Exception | None = None) -> None:
        self.body = body
        self.error = error
        self.gate: asyncio.Event | None = None
        self.calls: list[tuple[str, dict[str, Any], str, str | None]] = []

    async def complete(
        self, path: str, body: bytes, model: str, prefix_key: str | None
    ) -> UpstreamReply:
        self.calls.append((path, orjson.loads(body), model, prefix_key))
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        return UpstreamReply(replica=cast(Any, None), reason="prefix", body=self.body)


class FakeEmbedder:
    """Unit vectors from a table: cosine(a, b) is what the test sets."""

    model_id = "fake"
    dim = 2

    def __init__(self, vectors: dict[str, list[float]], error: Exception | None = None) -> None:
        self.vectors = vectors
        self.error = error
        self.calls = 0

    async def embed(self, text: str) -> list[float]:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.vectors[text]


class FakeVectors:
    def __init__(self, error: Exception | None = None) -> None:
        self.deleted: list[str] = []
        self.error = error

    async def delete(self, entry_ids: list[str]) -> None:
        if self.error is not None:
            raise self.error
        self.deleted.extend(entry_ids)


class FakeJudge:
    def __init__(self, verdict: bool | None) -> None:
        self.verdict = verdict
        self.seen: list[tuple[str, str, str, str]] = []

    async def same_answer(self, question: str, cached: str, fresh: str, model: str) -> bool | None:
        self.seen.append((question, cached, fresh, model))
        return self.verdict


class RaisingStore(MemoryExactStore):
    async def delete(self, key: str) -> bool:
        raise CacheUnavailableError("redis is down")


def vector(cosine: float) -> list[float]:
    """A unit vector at ``cosine`` to (1, 0)."""
    return [cosine, (1 - cosine**2) ** 0.5]


CACHED = "Paris is the capital of France."
CLOSE = "The capital of France is Paris."
FAR = "Bananas are rich in potassium."
VECTORS = {CACHED: [1.0, 0.0], CLOSE: vector(0.95), FAR: vector(0.30)}


def make(
    *,
    upstream: Any = None,
    embedder: Any = None,
    metrics: Metrics | None = None,
    spawn: Any = None,
    random: float = 0.0,
    **options: Any,
) -> ShadowChecks:
    options.setdefault("exact", MemoryExactStore(max_entries=10, max_bytes=100_000))
    return ShadowChecks(
        upstream=cast(Any, upstream or FakeUpstream(chat_reply(CACHED))),
        embedder=cast(Any, embedder or FakeEmbedder(VECTORS)),
        metrics=metrics or Metrics(),
        spawn=spawn or cast(Any, asyncio.get_running_loop().create_task),
        random=lambda: random,
        **{"rate": 0.02, **options},
    )


def shadow_count(metrics: Metrics, band: str, verdict: str, **extra: str) -> float:
    labels = {"band": band, "verdict": verdict, **extra}
    return metrics.registry.get_sample_value("deja_shadow_checks_total", labels) or 0.0


def tally(agree: int, disagree: int, error: int, precision: float | None) -> dict[str, Any]:
    return {"agree": agree, "disagree": disagree, "error": error, "estimated_precision": precision}


def invalidations(metrics: Metrics) -> float:
    return metrics.registry.get_sample_value("deja_shadow_invalidations_total") or 0.0


# --- bands and sampling ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("similarity", "label"),
    [
        (0.10, "<0.80"),
        (0.7999, "<0.80"),
        (0.80, "0.80-0.85"),
        (0.8499, "0.80-0.85"),
        (0.85, "0.85-0.90"),
        (0.90, "0.90-0.95"),
        (0.9499, "0.90-0.95"),
        (0.95, "≥0.95"),
        (1.0, "≥0.95"),
    ],
)
def test_band(similarity: float, label: str) -> None:
    assert band(similarity) == label


@pytest.mark.parametrize(
    ("rate", "draw", "sampled"),
    [
        (0.0, 0.0, False),  # rate 0: never, even on the lowest draw
        (1.0, 0.999999, True),  # rate 1: always, even on the highest draw
        (0.02, 0.019, True),
        (0.02, 0.02, False),
        (0.02, 0.5, False),
    ],
)
async def test_sampling(rate: float, draw: float, sampled: bool) -> None:
    spawned: list[Coroutine[Any, Any, None]] = []
    checks = make(rate=rate, random=draw, spawn=spawned.append)
    assert checks.maybe_check(chat_request(), chat_answer(CACHED), 0.9) is sampled
    assert len(spawned) == int(sampled)
    for work in spawned:
        await work
    assert checks.checked == int(sampled)


async def test_maybe_check_never_waits_for_the_check() -> None:
    upstream = FakeUpstream(chat_reply(CACHED))
    upstream.gate = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []

    def spawn(work: Coroutine[Any, Any, None]) -> None:
        tasks.append(asyncio.get_running_loop().create_task(work))

    checks = make(upstream=upstream, rate=1.0, spawn=spawn)
    # A plain function: it cannot await the (gated, never answering) replica call. The time
    # bound only guards against a busy wait; 5 ms flaked on a loaded 2-core machine.
    assert not inspect.iscoroutinefunction(checks.maybe_check)
    started = time.perf_counter()
    assert checks.maybe_check(chat_request(), chat_answer(CACHED), 0.93)
    assert time.perf_counter() - started < 0.5
    assert not upstream.gate.is_set()
    await asyncio.sleep(0.01)  # the check runs up to the blocked replica call
    assert len(tasks) == 1 and not tasks[0].done()
    assert len(upstream.calls) == 1
    upstream.gate.set()
    await asyncio.wait_for(tasks[0], 1)
    assert checks.stats()["bands"]["0.90-0.95"]["agree"] == 1


async def test_a_failing_spawn_does_not_fail_the_hit() -> None:
    def spawn(work: Coroutine[Any, Any, None]) -> None:
        raise RuntimeError("no running event loop")

    checks = make(rate=1.0, spawn=spawn)
    assert checks.maybe_check(chat_request(), chat_answer(CACHED), 0.9) is False
    assert checks.checked == 0


# --- what is sent and the verdicts ----------------------------------------------------------
async def test_the_request_is_resent_non_streamed_without_stream_options() -> None:
    upstream = FakeUpstream(chat_reply(CACHED))
    embedder = FakeEmbedder(VECTORS)
    checks = make(upstream=upstream, embedder=embedder)
    assert await checks.check(chat_request(stream=True), chat_answer(CACHED), 0.91) == "agree"
    path, body, model, prefix_key = upstream.calls[0]
    assert path == "/v1/chat/completions" and model == "m" and prefix_key is None
    assert body["stream"] is False and "stream_options" not in body
    assert body["messages"] == chat_request().body["messages"]
    assert embedder.calls == 0  # identical texts agree without embedding


@pytest.mark.parametrize(
    ("fresh", "agree_cosine", "verdict"),
    [(CLOSE, 0.90, "agree"), (CLOSE, 0.96, "disagree"), (FAR, 0.90, "disagree")],
)
async def test_embedding_verdict(fresh: str, agree_cosine: float, verdict: str) -> None:
    embedder = FakeEmbedder(VECTORS)
    metrics = Metrics()
    checks = make(
        upstream=FakeUpstream(chat_reply(fresh)),
        embedder=embedder,
        metrics=metrics,
        agree_cosine=agree_cosine,
    )
    assert await checks.check(chat_request(), chat_answer(CACHED), 0.86) == verdict
    assert embedder.calls == 2
    assert shadow_count(metrics, "0.85-0.90", verdict) == 1


async def test_completion_answers_are_compared_by_text() -> None:
    reply = orjson.dumps({"choices": [{"index": 0, "text": f" {FAR}", "finish_reason": "stop"}]})
    upstream = FakeUpstream(reply)
    req = gateway_request("completion", {"model": "m", "prompt": "Once upon a time"}, "acme")
    checks = make(upstream=upstream)
    assert await checks.check(req, answer("completion", CACHED), 0.97) == "disagree"
    assert upstream.calls[0][0] == "/v1/completions"
    assert upstream.calls[0][1]["stream"] is False


@pytest.mark.parametrize(
    ("judged", "verdict"), [(True, "agree"), (False, "disagree"), (None, "error")]
)
async def test_a_judge_decides_when_configured(judged: bool | None, verdict: str) -> None:
    judge = FakeJudge(judged)
    embedder = FakeEmbedder(VECTORS)
    checks = make(
        upstream=FakeUpstream(chat_reply(FAR)),
        embedder=embedder,
        judge=cast(AnswerJudge, judge),
    )
    assert await checks.check(chat_request(), chat_answer(CACHED), 0.9) == verdict
    assert judge.seen == [("What is the capital of France?", CACHED, FAR, "m")]
    assert embedder.calls == 0


# --- failures -------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["upstream", "malformed", "embedder", "timeout", "judge"], ids=str)
async def test_failures_count_as_errors(case: str) -> None:
    upstream = FakeUpstream(chat_reply(FAR))
    embedder = FakeEmbedder(VECTORS)
    options: dict[str, Any] = {}
    if case == "upstream":
        upstream.error = UpstreamServerError("replica failed with 500", replica_status=500)
    elif case == "malformed":
        upstream.body = b'{"choices": []}'
    elif case == "embedder":
        embedder.error = EmbedderError("the embedder failed")
    elif case == "timeout":
        upstream.gate = asyncio.Event()  # never set
        options["timeout"] = 0.02
    else:

        class Broken:
            async def same_answer(self, *args: str) -> bool | None:
                raise RuntimeError("judge crashed")

        options["judge"] = Broken()
    metrics = Metrics()
    checks = make(upstream=upstream, embedder=embedder, metrics=metrics, **options)
    assert await checks.check(chat_request(), chat_answer(CACHED), 0.82) == "error"
    assert shadow_count(metrics, "0.80-0.85", "error") == 1
    stats = checks.stats()
    assert stats["tenants"]["acme"] == tally(0, 0, 1, None)


# --- invalidation ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fresh", "invalidate", "removed"),
    [(FAR, True, True), (FAR, False, False), (CLOSE, True, False)],  # agreement never removes
)
async def test_invalidation_follows_the_switch(fresh: str, invalidate: bool, removed: bool) -> None:
    exact = MemoryExactStore(max_entries=10, max_bytes=100_000)
    await exact.set(ENTRY, chat_answer(CACHED), ttl=60)
    vectors = FakeVectors()
    metrics = Metrics()
    checks = make(
        upstream=FakeUpstream(chat_reply(fresh)),
        metrics=metrics,
        exact=exact,
        vectors=vectors,
        invalidate=invalidate,
    )
    verdict = "agree" if fresh == CLOSE else "disagree"
    assert await checks.check(chat_request(), chat_answer(CACHED), 0.88) == verdict
    assert (await exact.get(ENTRY) is None) is removed
    assert vectors.deleted == ([ENTRY] if removed else [])
    assert invalidations(metrics) == (1 if removed else 0)


async def test_invalidation_failures_are_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    vectors = FakeVectors(error=VectorStoreError("qdrant is down"))
    metrics = Metrics()
    checks = make(
        upstream=FakeUpstream(chat_reply(FAR)),
        metrics=metrics,
        exact=RaisingStore(max_entries=10, max_bytes=100_000),
        vectors=vectors,
        invalidate=True,
    )
    with caplog.at_level("WARNING", logger="deja.shadow"):
        assert await checks.check(chat_request(), chat_answer(CACHED), 0.88) == "disagree"
    assert invalidations(metrics) == 0
    messages = [r.getMessage() for r in caplog.records]
    assert any("redis is down" in m for m in messages)
    assert any("qdrant is down" in m for m in messages)
    assert all(ENTRY not in m for m in messages)  # a short prefix only


# --- counts ---------------------------------------------------------------------------------
async def test_stats_per_tenant_and_band() -> None:
    checks = make(rate=0.5)
    runs = [
        ("acme", CACHED, 0.97),
        ("acme", CLOSE, 0.97),
        ("acme", FAR, 0.83),
        ("beta", FAR, 0.83),
        ("beta", CACHED, 0.70),
    ]
    for tenant, fresh, similarity in runs:
        checks.upstream = cast(Any, FakeUpstream(chat_reply(fresh)))
        await checks.check(chat_request(tenant=tenant), chat_answer(CACHED), similarity)
    checks.upstream = cast(Any, FakeUpstream(error=UpstreamServerError("x", replica_status=502)))
    await checks.check(chat_request(tenant="beta"), chat_answer(CACHED), 0.91)

    stats = checks.stats()
    assert stats["rate"] == 0.5 and stats["checked"] == 6
    assert stats["tenants"] == {
        "acme": tally(2, 1, 0, 2 / 3),
        "beta": tally(1, 1, 1, 0.5),
    }
    assert list(stats["bands"]) == ["<0.80", "0.80-0.85", "0.90-0.95", "≥0.95"]
    assert stats["bands"]["≥0.95"]["estimated_precision"] == 1.0
    assert stats["bands"]["0.80-0.85"]["estimated_precision"] == 0.0
    assert stats["bands"]["0.90-0.95"] == tally(0, 0, 1, None)


async def test_tenant_label_on_the_metric_when_enabled() -> None:
    metrics = Metrics(tenant_label=True)
    checks = make(metrics=metrics)
    await checks.check(chat_request(tenant="acme"), chat_answer(CACHED), 0.99)
    assert shadow_count(metrics, "≥0.95", "agree", tenant="acme") == 1
