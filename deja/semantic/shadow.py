"""Live precision of the semantic layer, measured by shadow checks.

A semantic hit serves a cached answer to a *paraphrase* of the cached question. Offline
calibration sets θ, but only production traffic says how often a served paraphrase was really
the same question. So deja re-asks a small share of semantic hits (``rate``, 2% by default) to
the model in the background and compares the fresh answer with the one it served:

- the served hit is never delayed: :meth:`ShadowChecks.maybe_check` only samples and hands a
  coroutine to the gateway's background tasks; it never awaits and never raises;
- agreement is counted per similarity band (where θ sits decides which bands are served) and per
  tenant (tenants ask different kinds of questions), both as Prometheus counters and in process
  for the admin API (:meth:`ShadowChecks.stats`);
- the verdict is a judge's when one is configured, else the cosine of the two answers'
  embeddings (the embedder is already loaded; a model-as-judge call costs a second request);
- a disagreeing entry can be invalidated automatically (off by default: one disagreement on a
  sampling model may be noise, and deleting is not undoable).

A failure anywhere in a check (replica, embedder, judge, timeout) is counted as an ``error``
verdict and logged at debug level: a shadow check is measurement, never part of serving.
"""

from __future__ import annotations

import asyncio
import logging
import random as _random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import orjson

from deja.cache.entry import CachedAnswer
from deja.cache.exact.base import ExactStore
from deja.embedding.base import Embedder
from deja.errors import describe
from deja.observability.metrics import Metrics
from deja.request import GatewayRequest
from deja.semantic.index import VectorStore
from deja.semantic.scope import message_text, question_text
from deja.upstream.upstream import Upstream

log = logging.getLogger("deja.shadow")

Verdict = Literal["agree", "disagree", "error"]
VERDICTS: tuple[Verdict, ...] = ("agree", "disagree", "error")

#: Similarity bands, lowest first: (lower bound, label). Fixed labels keep the metric's label
#: values bounded and comparable across θ changes.
BANDS: tuple[tuple[float, str], ...] = (
    (0.95, "≥0.95"),
    (0.90, "0.90-0.95"),
    (0.85, "0.85-0.90"),
    (0.80, "0.80-0.85"),
)
LOWEST_BAND = "<0.80"
#: Every band label, lowest first (the order of :meth:`ShadowChecks.stats`).
BAND_LABELS: tuple[str, ...] = (LOWEST_BAND, *(label for _, label in reversed(BANDS)))


def band(similarity: float) -> str:
    """The similarity band a hit falls in: ``"<0.80"``, ``"0.80-0.85"``, ``"0.85-0.90"``,
    ``"0.90-0.95"`` or ``"≥0.95"`` (lower bounds inclusive)."""
    for lower, label in BANDS:
        if similarity >= lower:
            return label
    return LOWEST_BAND


#: Told each shadow verdict: the request, the answer served, its decision score, agreed.
OnVerdict = Callable[[GatewayRequest, CachedAnswer, "float | None", bool], None]


class AnswerJudge(Protocol):
    """Decides whether two answers to one question say the same thing (e.g. a model-as-judge
    call). None means it could not tell; the check then counts as an error."""

    async def same_answer(
        self, question: str, cached: str, fresh: str, model: str
    ) -> bool | None: ...


@dataclass(slots=True)
class Tally:
    """Verdict counts of one tenant or one band."""

    agree: int = 0
    disagree: int = 0
    error: int = 0

    def add(self, verdict: Verdict) -> None:
        setattr(self, verdict, getattr(self, verdict) + 1)

    def as_dict(self) -> dict[str, Any]:
        """The counts and the estimated precision, agree / (agree + disagree); errors say
        nothing about precision, so they are left out of it (None before any verdict)."""
        decided = self.agree + self.disagree
        return {
            "agree": self.agree,
            "disagree": self.disagree,
            "error": self.error,
            "estimated_precision": self.agree / decided if decided else None,
        }


def _tool_calls_text(message: dict[str, Any]) -> str:
    """Tool calls as comparable text: names and arguments only (call ids differ per answer)."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return ""
    parts = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            parts.append(f"{function.get('name')}({function.get('arguments')})")
    return "\n".join(parts)


def message_answer_text(message: dict[str, Any]) -> str:
    """What a chat answer says: its content text, or its tool calls when it has no content."""
    return message_text(message).strip() or _tool_calls_text(message)


def cached_text(answer: CachedAnswer) -> str:
    """The text of the answer that was served."""
    if answer.endpoint == "chat":
        return message_answer_text(answer.message or {})
    return (answer.text or "").strip()


async def answers_agree(embedder: Embedder, one: str, other: str, cosine: float = 0.90) -> bool:
    """True when two answers' embeddings are at least ``cosine`` apart. Identical texts agree
    without embedding; an empty text only agrees with an empty one."""
    if one == other:
        return True
    if not one or not other:
        return False
    a, b = await asyncio.gather(embedder.embed(one), embedder.embed(other))
    return sum(x * y for x, y in zip(a, b, strict=True)) >= cosine  # unit vectors: dot = cosine


def fresh_text(endpoint: str, body: bytes) -> str:
    """The text of a replica's non-streamed answer; ValueError when it has no usable choice."""
    parsed = orjson.loads(body)
    choices = parsed.get("choices") if isinstance(parsed, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("the fresh answer has no choices")
    choice = choices[0]
    if endpoint == "chat":
        message = choice.get("message")
        if not isinstance(message, dict):
            raise ValueError("the fresh answer has no message")
        return message_answer_text(message)
    text = choice.get("text")
    if not isinstance(text, str):
        raise ValueError("the fresh answer has no text")
    return text.strip()


def shadow_body(req: GatewayRequest) -> bytes:
    """The request re-sent whole but not streamed: the answer is compared, not relayed, and
    ``stream_options`` is only valid with ``stream: true``."""
    body = {k: v for k, v in req.body.items() if k != "stream_options"}
    body["stream"] = False
    return orjson.dumps(body)


class ShadowChecks:
    """Samples semantic hits, re-asks them in the background, and counts the verdicts."""

    def __init__(
        self,
        *,
        rate: float,
        upstream: Upstream,
        embedder: Embedder,
        metrics: Metrics,
        spawn: Callable[[Coroutine[Any, Any, None]], object],
        exact: ExactStore,
        vectors: VectorStore | None = None,
        invalidate: bool = False,
        agree_cosine: float = 0.90,
        timeout: float = 30.0,
        judge: AnswerJudge | None = None,
        random: Callable[[], float] = _random.random,
        on_verdict: OnVerdict | None = None,
    ) -> None:
        self.rate = rate
        self.upstream = upstream
        self.embedder = embedder
        self.metrics = metrics
        self.exact = exact
        self.vectors = vectors
        self.invalidate = invalidate
        self.agree_cosine = agree_cosine
        self.timeout = timeout
        self.judge = judge
        self._spawn = spawn
        self._random = random
        self.on_verdict = on_verdict
        self.checked = 0
        self._tenants: dict[str, Tally] = {}
        self._bands: dict[str, Tally] = {}

    def maybe_check(
        self,
        req: GatewayRequest,
        answer: CachedAnswer,
        similarity: float,
        score: float | None = None,
    ) -> bool:
        """Sample this hit (served at cosine ``similarity``, decision ``score``) with
        probability ``rate``; when sampled, start its check in the background and return True.
        Called on the serving path: never awaits, never raises."""
        try:
            if self.rate <= 0 or self._random() >= self.rate:
                return False
        except Exception as exc:  # a broken random source must not fail a served hit
            log.debug("shadow sampling failed: %s", describe(exc))
            return False
        work = self._background(req, answer, similarity, score)
        try:
            self._spawn(work)
        except Exception as exc:  # e.g. no running loop: the hit is served all the same
            work.close()
            log.debug("shadow check not started: %s", describe(exc))
            return False
        return True

    async def _background(
        self, req: GatewayRequest, answer: CachedAnswer, sim: float, score: float | None
    ) -> None:
        await self.check(req, answer, sim, score)

    async def check(
        self,
        req: GatewayRequest,
        answer: CachedAnswer,
        similarity: float,
        score: float | None = None,
    ) -> str:
        """Re-ask ``req``, compare the fresh answer with ``answer``, count and return the
        verdict: ``"agree"``, ``"disagree"`` or ``"error"`` (any failure; never raises). An
        agreement or a disagreement goes to ``on_verdict`` (the learning loop)."""
        verdict: Verdict
        try:
            async with asyncio.timeout(self.timeout):
                verdict = await self._verdict(req, answer)
        except Exception as exc:  # TimeoutError included: a check is measurement only
            log.debug("shadow check failed (%s): %s", type(exc).__name__, describe(exc))
            verdict = "error"
        self._record(req.tenant, similarity, verdict)
        if verdict != "error" and self.on_verdict is not None:
            self.on_verdict(req, answer, score, verdict == "agree")
        if verdict == "disagree" and self.invalidate:
            await self._invalidate(req, answer, similarity)
        return verdict

    async def _verdict(self, req: GatewayRequest, answer: CachedAnswer) -> Verdict:
        reply = await self.upstream.complete(req.path, shadow_body(req), req.model, prefix_key=None)
        fresh = fresh_text(req.endpoint, reply.body)
        cached = cached_text(answer)
        if self.judge is not None:
            same = await self.judge.same_answer(question_text(req), cached, fresh, req.model)
            if same is None:
                return "error"
            return "agree" if same else "disagree"
        return "agree" if await self.similar(cached, fresh) else "disagree"

    async def similar(self, cached: str, fresh: str) -> bool:
        return await answers_agree(self.embedder, cached, fresh, self.agree_cosine)

    def _record(self, tenant: str, similarity: float, verdict: Verdict) -> None:
        label = band(similarity)
        self.checked += 1
        self._tenants.setdefault(tenant, Tally()).add(verdict)
        self._bands.setdefault(label, Tally()).add(verdict)
        labels = (label, verdict, tenant) if self.metrics.tenant_label else (label, verdict)
        self.metrics.count(self.metrics.shadow_checks, *labels)

    async def _invalidate(self, req: GatewayRequest, answer: CachedAnswer, sim: float) -> None:
        """Drop a disagreeing entry from both layers. It counts as invalidated once the exact
        entry is gone: a vector left behind then only leads to a miss."""
        entry = answer.entry_id
        removed = True
        try:
            await self.exact.delete(entry)
        except Exception as exc:
            removed = False
            log.warning("shadow invalidation of entry %s failed: %s", entry[:12], describe(exc))
        if self.vectors is not None:
            try:
                await self.vectors.delete([entry])
            except Exception as exc:
                log.warning(
                    "shadow invalidation of vector %s failed: %s", entry[:12], describe(exc)
                )
        if removed:
            self.metrics.shadow_invalidations.inc()
            log.info(
                "shadow check disagreed (tenant %s, similarity %.3f): invalidated entry %s",
                req.tenant,
                sim,
                entry[:12],
            )

    def stats(self) -> dict[str, Any]:
        """The in-process counts for the admin API: per tenant and per band."""
        return {
            "rate": self.rate,
            "checked": self.checked,
            "tenants": {name: tally.as_dict() for name, tally in sorted(self._tenants.items())},
            "bands": {
                name: self._bands[name].as_dict() for name in BAND_LABELS if name in self._bands
            },
        }
