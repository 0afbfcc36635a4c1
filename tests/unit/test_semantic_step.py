"""The semantic step's decision and failure rules, with fakes for the parts around it:
top-k candidates above θ, one batched verification, the cut-off for the precision target, the
judge's grey zone, shadow sampling, and "any failure is a plain miss"."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import generate_latest

from deja.cache.entry import CachedAnswer
from deja.errors import EmbedderError, VerifierError
from deja.observability.lookups import RecentLookups
from deja.observability.metrics import Metrics
from deja.request import CachePolicy, Outcome
from deja.semantic.cutoffs import parse_table
from deja.semantic.index import ScoredPoint
from deja.tenancy.thresholds import Thresholds
from middleware.lookup import Lookup
from middleware.semantic import Checks, SemanticSettings, SemanticStep
from middleware.validate import validate

TABLE = parse_table(
    {
        "k": 4,
        "cosine_floor": 0.7,
        "decision": "verifier",
        "table": [
            {"precision": 0.80, "tau": 0.40},
            {"precision": 0.90, "tau": 0.60},
            {"precision": 0.95, "tau": 0.80},
        ],
    },
    Path("t.json"),
)


def probs(*values: float) -> dict[str, float]:
    """Verifier probability per candidate question, in the order of ``POINTS``."""
    return {q.payload["question"]: p for q, p in zip(POINTS, values, strict=True)}


def answer(entry_id: str) -> CachedAnswer:
    return CachedAnswer(entry_id, "chat", "m", "stop", 1.0, message={"content": entry_id})


def point(entry_id: str, score: float, question: str) -> ScoredPoint:
    return ScoredPoint(entry_id=entry_id, score=score, payload={"question": question})


class FakeStore:
    def __init__(self) -> None:
        self.deleted: list[str] = []

    async def delete(self, ids: list[str]) -> int:
        self.deleted.extend(ids)
        return len(ids)


class FakeCache:
    def __init__(self, points: list[ScoredPoint]) -> None:
        self.points = points
        self.store = FakeStore()
        self.limit = 0
        self.embedded = 0
        self.delay = 0.0
        self.fail = 0  # the next this many embeddings fail

    async def embed(self, query: Any) -> list[float]:
        self.embedded += 1
        await asyncio.sleep(self.delay)
        if self.fail:
            self.fail -= 1
            raise EmbedderError("embedding failed: boom")
        return [0.1] * 4

    async def search(self, query: Any, vector: Any, *, max_age: Any, limit: int) -> Any:
        self.limit = limit
        return self.points[:limit]


class FakeExact:
    def __init__(self, ids: Sequence[str]) -> None:
        self.answers = {i: answer(i) for i in ids}

    async def get(self, entry_id: str) -> CachedAnswer | None:
        return self.answers.get(entry_id)


class FakeVerifier:
    model_id = "fake"

    def __init__(self, probs: dict[str, float], delay: float = 0.0, fail: bool = False) -> None:
        self.probs = probs  # question → probability
        self.delay = delay
        self.fail = fail
        self.calls: list[list[str]] = []

    async def logits(self, query: str, cached: Sequence[str]) -> list[float]:
        import math

        self.calls.append(list(cached))
        await asyncio.sleep(self.delay)
        if self.fail:
            raise VerifierError("verifier failed: boom")
        return [math.log(self.probs[c] / (1 - self.probs[c])) for c in cached]

    async def close(self) -> None:
        return None


class Spawned:
    def __init__(self) -> None:
        self.work: list[Coroutine[Any, Any, None]] = []

    def __call__(self, work: Coroutine[Any, Any, None]) -> None:
        self.work.append(work)

    async def run(self) -> None:
        await asyncio.gather(*self.work)


def request(question: str = "How do I configure the agent?") -> Any:
    body = {"model": "m", "messages": [{"role": "user", "content": question}]}
    return validate("chat", orjson.dumps(body), tenant="t", policy=CachePolicy())


def step(points: list[ScoredPoint], verifier: Any, **kw: Any) -> tuple[SemanticStep, Spawned]:
    spawned = Spawned()
    thresholds = Thresholds(global_=0.7)
    thresholds.precision.global_ = kw.pop("precision", 0.90)
    semantic = SemanticStep(
        FakeCache(points),  # type: ignore[arg-type]
        FakeExact(kw.pop("stored", [p.entry_id for p in points])),  # type: ignore[arg-type]
        settings=SemanticSettings(
            timeout=kw.pop("timeout", 1.0),
            top_k=4,
            max_pending=kw.pop("max_pending", 4),
            queue_wait=kw.pop("queue_wait", 1.0),
        ),
        thresholds=thresholds,
        metrics=Metrics(),
        spawn=spawned,
        checks=Checks(verifier=verifier, table=TABLE, **kw),
    )
    return semantic, spawned


POINTS = [
    point("a" * 64, 0.95, "Is it not safe to configure the agent?"),
    point("b" * 64, 0.90, "What is the process for configuring the agent?"),
    point("c" * 64, 0.72, "How do I configure a proxy?"),
    point("d" * 64, 0.60, "Below θ: never verified"),
]


async def lookup(semantic: SemanticStep, req: Any = None) -> Lookup:
    return await semantic.lookup(req or request(), Lookup(Outcome.MISS, "e" * 64))


async def test_the_best_verified_candidate_is_served_not_the_nearest() -> None:
    verifier = FakeVerifier(probs(0.3, 0.7, 0.5, 0.99))
    semantic, _ = step(POINTS, verifier)
    got = await lookup(semantic)
    assert got.outcome is Outcome.SEMANTIC and got.answer is not None
    assert got.answer.entry_id == "b" * 64
    assert got.similarity == 0.90 and got.verifier_score == pytest.approx(0.7)
    assert verifier.calls == [[p.payload["question"] for p in POINTS[:3]]]  # one call, above θ


async def test_a_stricter_target_turns_the_same_candidate_into_a_miss() -> None:
    verifier = FakeVerifier({q.payload["question"]: 0.7 for q in POINTS})
    semantic, _ = step(POINTS, verifier, precision=0.95)
    got = await lookup(semantic)
    assert got.outcome is Outcome.MISS and got.verifier_score == pytest.approx(0.7)


@pytest.mark.parametrize("failure", [{"delay": 5.0}, {"fail": True}])
async def test_a_slow_or_failing_verifier_is_a_plain_miss(failure: dict[str, Any]) -> None:
    verifier = FakeVerifier({q.payload["question"]: 0.99 for q in POINTS}, **failure)
    semantic, _ = step(POINTS, verifier, timeout=0.05)
    got = await asyncio.wait_for(lookup(semantic), 1.0)
    assert got.outcome is Outcome.MISS and got.answer is None


async def test_an_evicted_answer_drops_its_point_and_tries_the_next() -> None:
    verifier = FakeVerifier(probs(0.9, 0.8, 0.1, 0.1))
    semantic, spawned = step(POINTS, verifier, stored=["b" * 64])
    got = await lookup(semantic)
    assert got.answer is not None and got.answer.entry_id == "b" * 64
    await spawned.run()
    assert semantic.cache.store.deleted == ["a" * 64]  # type: ignore[attr-defined]


class FakeJudge:
    def __init__(self, mode: str, verdict: bool | None) -> None:
        self.mode = mode
        self.answer = verdict
        self.asked: list[tuple[str, str]] = []
        self.later: list[tuple[str, str]] = []
        self.calls = self.tokens = 0

    def known(self, query: str, cached: str, model: str) -> bool | None:
        return None

    async def verdict(self, query: str, cached: str, model: str) -> bool | None:
        self.asked.append((query, cached))
        return self.answer

    def judge_later(
        self, query: str, cached: str, model: str, spawn: Any, then: Any = None
    ) -> None:
        self.later.append((query, cached))


async def test_the_judge_decides_the_grey_zone_only() -> None:
    grey = probs(0.1, 0.5, 0.1, 0.1)
    sync = FakeJudge("sync", True)
    semantic, spawned = step(POINTS, FakeVerifier(grey), judge=sync)  # τ(0.90)=0.6, τ(0.80)=0.4
    got = await lookup(semantic)
    assert got.outcome is Outcome.SEMANTIC and sync.asked == [
        ("How do I configure the agent?", "What is the process for configuring the agent?")
    ]
    assert len(spawned.work) == 1  # what the verdict teaches runs after the response
    await spawned.run()
    later = FakeJudge("async", True)
    semantic, _ = step(POINTS, FakeVerifier(grey), judge=later)
    got = await lookup(semantic)
    assert got.outcome is Outcome.MISS and later.later and not later.asked
    below = FakeJudge("sync", True)
    semantic, _ = step(POINTS, FakeVerifier({q: 0.2 for q in grey}), judge=below)
    assert (await lookup(semantic)).outcome is Outcome.MISS and not below.asked


class FakeShadow:
    def __init__(self) -> None:
        self.seen: list[float] = []
        self.scores: list[float | None] = []

    def maybe_check(
        self, req: Any, answer: CachedAnswer, similarity: float, score: float | None = None
    ) -> bool:
        self.seen.append(similarity)
        self.scores.append(score)
        return True


async def test_hits_are_offered_to_shadow_checks() -> None:
    shadow = FakeShadow()
    verifier = FakeVerifier({q.payload["question"]: 0.99 for q in POINTS})
    semantic, _ = step(POINTS, verifier, shadow=shadow)
    assert (await lookup(semantic)).outcome is Outcome.SEMANTIC
    assert shadow.seen == [0.95] and shadow.scores[0] is not None  # the decision score too


async def test_cosine_alone_without_a_verifier() -> None:
    semantic, _ = step(POINTS, None)
    got = await lookup(semantic)
    assert got.outcome is Outcome.SEMANTIC and got.verifier_score is None
    assert got.answer is not None and got.answer.entry_id == "a" * 64


def test_same_words_ignores_case_punctuation_and_spacing_only() -> None:
    from deja.semantic.verifier import same_words

    assert same_words("How do I reset my password?", "how do i reset  my password")
    assert same_words("¿Qué hora es?", "qué hora es")
    assert not same_words("Is it safe to eat raw eggs?", "Is it not safe to eat raw eggs?")
    assert not same_words("qué hora es", "que hora es")  # accents are letters


async def test_the_same_question_up_to_case_is_served_without_the_verifier() -> None:
    points = [point("f" * 64, 0.97, "how do i configure the agent")]
    verifier = FakeVerifier({"how do i configure the agent": 0.01})
    semantic, _ = step(points, verifier)
    got = await lookup(semantic)
    assert got.outcome is Outcome.SEMANTIC and got.verifier_score == 1.0
    assert verifier.calls == []


async def test_lookups_feed_the_recent_ring_and_a_close_verified_miss_is_a_near_miss() -> None:
    verifier = FakeVerifier(probs(0.55, 0.3, 0.2, 0.1))  # best 0.55, τ 0.60: 0.05 short
    semantic, _ = step(POINTS, verifier)
    semantic.recent = RecentLookups()
    assert (await lookup(semantic)).outcome is Outcome.MISS
    [near] = semantic.recent.near_misses()
    assert (near.cut, near.cutoff, near.score) == ("tau", 0.60, pytest.approx(0.55))
    assert near.question == "How do I configure the agent?"
    assert near.cached_question == POINTS[0].payload["question"]
    assert near.entry_id == "a" * 64 and near.similarity == 0.95
    hit, _ = step(POINTS, FakeVerifier(probs(0.3, 0.9, 0.2, 0.1)))
    hit.recent = RecentLookups()
    await lookup(hit)
    [sample] = hit.recent.samples
    assert sample.served and sample.similarity == 0.90 and sample.score == pytest.approx(0.9)
    assert hit.recent.near_misses() == []


async def test_a_best_candidate_just_under_theta_is_a_near_miss_against_theta() -> None:
    semantic, _ = step([point("f" * 64, 0.66, "How do I configure it?")], FakeVerifier({}))
    semantic.recent = RecentLookups()
    await lookup(semantic)
    [near] = semantic.recent.near_misses()
    assert (near.cut, near.cutoff, near.score, near.similarity) == ("theta", 0.7, None, 0.66)
    empty, _ = step([], FakeVerifier({}))
    empty.recent = RecentLookups()
    await lookup(empty)
    [nothing] = empty.recent.samples
    assert nothing.similarity is None and not nothing.served


def orphans_counted(semantic: SemanticStep) -> float:
    return semantic.metrics.semantic_orphans._value.get()  # type: ignore[no-any-return]


async def test_the_same_question_whose_answer_is_gone_is_a_plain_miss_and_counted() -> None:
    """After a restart with an in-process exact store: the question's own point is found at
    1.0, its answer is not. It is deleted and counted, never reported as similarity 1.0."""
    points = [point("e" * 64, 1.0, "How do I configure the agent?")]
    semantic, spawned = step(points, FakeVerifier({}), stored=[])
    got = await lookup(semantic)
    assert got.outcome is Outcome.MISS and got.answer is None
    assert got.similarity is None and got.verifier_score is None
    assert orphans_counted(semantic) == 1
    await spawned.run()
    assert semantic.cache.store.deleted == ["e" * 64]  # type: ignore[attr-defined]


async def test_an_orphan_miss_reports_the_closest_live_candidate() -> None:
    verifier = FakeVerifier(probs(0.9, 0.5, 0.1, 0.1))  # only "a" reaches τ, and it is gone
    semantic, spawned = step(POINTS, verifier, stored=["b" * 64, "c" * 64])
    got = await lookup(semantic)
    assert got.outcome is Outcome.MISS
    assert got.similarity == 0.90 and got.verifier_score == pytest.approx(0.5)
    assert orphans_counted(semantic) == 1
    await spawned.run()
    cosine, spawned = step(POINTS[:1], None, stored=[])  # cosine alone: its candidate is gone
    got = await lookup(cosine)
    assert got.outcome is Outcome.MISS and got.similarity is None
    assert orphans_counted(cosine) == 1
    await spawned.run()


async def test_a_lookup_over_the_pending_cap_waits_its_turn_before_its_budget_starts() -> None:
    """Issue 19 (5): past ``max_pending`` a lookup waits in line instead of sharing the
    threads with the others (so all of them would run out of the budget together); its budget
    starts with its slot. Two lookups of 0.2 s each, one slot, a 0.3 s budget: both served,
    no timeout, nothing shed."""
    verifier = FakeVerifier(probs(0.9, 0.9, 0.9, 0.9), delay=0.2)
    semantic, _ = step(POINTS, verifier, max_pending=1, timeout=0.3, queue_wait=1.0)
    first = asyncio.ensure_future(lookup(semantic))
    await asyncio.sleep(0.01)
    assert semantic.slots.running == 1
    second = await lookup(semantic)
    assert second.outcome is Outcome.SEMANTIC and (await first).outcome is Outcome.SEMANTIC
    assert len(verifier.calls) == 2
    text = generate_latest(semantic.metrics.registry).decode()
    assert "deja_semantic_errors_total{" not in text  # no timeout, nothing shed
    assert semantic.slots.running == 0


async def test_a_lookup_that_waits_past_the_queue_bound_is_shed_with_no_work_started() -> None:
    """Past ``queue_wait`` the lookup is a safe miss that keeps its question (its answer is
    still indexed) and started nothing: no embedding, no verifier call."""
    verifier = FakeVerifier(probs(0.9, 0.9, 0.9, 0.9), delay=0.3)
    semantic, _ = step(POINTS, verifier, max_pending=1, queue_wait=0.05)
    cache: FakeCache = semantic.cache  # type: ignore[assignment]
    slow = asyncio.ensure_future(lookup(semantic))
    await asyncio.sleep(0.01)
    loop = asyncio.get_running_loop()
    started = loop.time()
    shed = await lookup(semantic)
    assert 0.04 < loop.time() - started < 0.2
    assert shed.outcome is Outcome.MISS and shed.query is not None and shed.vector is None
    assert cache.embedded == 1 and len(verifier.calls) == 1  # the first lookup's only
    assert (await slow).outcome is Outcome.SEMANTIC
    text = generate_latest(semantic.metrics.registry).decode()
    assert 'deja_semantic_errors_total{kind="shed"} 1.0' in text


async def test_a_timed_out_lookup_hands_its_running_embedding_to_the_store() -> None:
    """A lookup that times out while its question is being embedded does not leave the store
    step to embed it again: the store awaits the same embedding (one embedder call)."""
    semantic, _ = step(POINTS, FakeVerifier(probs(0.9, 0.9, 0.9, 0.9)), timeout=0.02)
    cache: FakeCache = semantic.cache  # type: ignore[assignment]
    cache.delay = 0.1
    failed = await lookup(semantic)
    assert failed.outcome is Outcome.MISS and failed.vector is None
    assert failed.embedding is not None
    settled = await semantic.settle(failed)
    assert settled is not None and settled.vector == [0.1] * 4 and settled.embedding is None
    assert cache.embedded == 1


async def test_a_failed_lookup_keeps_its_question_for_the_store() -> None:
    semantic, _ = step(POINTS, FakeVerifier(probs(0.9, 0.9, 0.9, 0.9), delay=0.2), timeout=0.01)
    failed = await lookup(semantic)
    assert failed.outcome is Outcome.MISS and failed.query is not None


async def test_a_failed_embedding_is_made_again_in_the_queue_for_the_store() -> None:
    """An embedding that failed is not handed on: the store step embeds the question again,
    in the lookups' queue behind every lookup, and gets its vector."""
    semantic, _ = step(POINTS, FakeVerifier(probs(0.9, 0.9, 0.9, 0.9)))
    cache: FakeCache = semantic.cache  # type: ignore[assignment]
    cache.fail = 1
    failed = await lookup(semantic)
    assert failed.outcome is Outcome.MISS and failed.embedding is None
    settled = await semantic.settle(failed)
    assert settled is not None and settled.vector == [0.1] * 4
    assert cache.embedded == 2 and semantic.slots.running == 0


VETO_TABLE = parse_table(
    {
        "k": 4,
        "cosine_floor": 0.7,
        "decision": "combined",
        "combined": {"w_logit": 0.8, "w_cosine": 5.0, "bias": -4.5},
        "vetoes": ["number"],
        "table": [{"precision": 0.90, "tau": 0.60}],
    },
    Path("t.json"),
)


async def test_a_vetoed_candidate_is_not_sent_to_the_verifier_and_scores_the_same() -> None:
    """A candidate whose number the query does not share scores 0 whatever the model says,
    so the model is asked only about the others: same ranking, same scores as asking all."""
    from deja.semantic.verifier import rank

    candidates = [
        point("a" * 64, 0.97, "How do I configure the proxy number 13?"),
        point("b" * 64, 0.91, "What is the process for configuring the proxy number 12?"),
        point("c" * 64, 0.88, "How do I configure the proxy number 112?"),
    ]
    verifier = FakeVerifier({p.payload["question"]: 0.9 for p in candidates})
    semantic, _ = step(candidates, verifier)
    semantic.checks = Checks(verifier=verifier, table=VETO_TABLE)
    req = request("How do I configure the proxy number 12?")
    got = await semantic.lookup(req, Lookup(Outcome.MISS, "e" * 64))
    assert verifier.calls == [["What is the process for configuring the proxy number 12?"]]
    assert got.outcome is Outcome.SEMANTIC and got.answer is not None
    assert got.answer.entry_id == "b" * 64
    everything = await FakeVerifier(verifier.probs).logits(
        "How do I configure the proxy number 12?", [str(p.payload["question"]) for p in candidates]
    )
    asked_all = rank(VETO_TABLE, "How do I configure the proxy number 12?", candidates, everything)
    assert got.verifier_score == asked_all[0].score
    assert [s.score for s in asked_all[1:]] == [0.0, 0.0]


async def test_no_verifier_call_when_every_candidate_is_vetoed() -> None:
    candidates = [point("a" * 64, 0.97, "How do I configure the proxy number 13?")]
    verifier = FakeVerifier({"How do I configure the proxy number 13?": 0.99})
    semantic, _ = step(candidates, verifier)
    semantic.checks = Checks(verifier=verifier, table=VETO_TABLE)
    req = request("How do I configure the proxy number 12?")
    got = await semantic.lookup(req, Lookup(Outcome.MISS, "e" * 64))
    assert verifier.calls == [] and got.outcome is Outcome.MISS and got.verifier_score == 0.0
    text = generate_latest(semantic.metrics.registry).decode()
    assert "deja_verifier_duration_seconds_count 0.0" in text
