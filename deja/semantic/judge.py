"""The model as judge: ask the replicas themselves whether two questions ask the same thing.

Why: similarity alone cannot separate "how do I reverse a list in Python" from "how do I sort a
list in Python" near the threshold θ. On a GPU deployment the replicas already hold a model that
can tell, so for a candidate in the grey zone deja may spend one tiny request on them instead of
guessing. The request is built to cost as little as possible:

* a CONSTANT system prompt (:data:`JUDGE_SYSTEM_PROMPT`), so every judge request shares one
  prefix that stays in vLLM's prefix cache and only the two questions are prefilled;
* ``max_tokens`` 1 and ``temperature`` 0: one deterministic token, "yes" or "no";
* no prefix key (``prefix_key=None``): the judge prompt must not pull a tenant's conversation
  prefix to one replica, the router places it as it places any keyless request.

Two modes (:data:`JudgeMode`). ``sync`` waits for :meth:`Judge.verdict` before deciding, which
adds one short round trip to that request. ``async`` never delays a request: the candidate is
served as a miss now, :meth:`Judge.judge_later` asks in the background, and the verdict is
remembered, so the next time the same pair comes up :meth:`Judge.known` decides it without a
call. ``off`` makes no calls at all. Every call and every token it spends is counted, on the
``deja_judge_requests`` / ``deja_judge_tokens`` metrics and on :attr:`Judge.calls` /
:attr:`Judge.tokens`, because the judge is not free and its cost must be weighed against the
hits it saves.

A judge never fails a request: a replica error, a timeout or an answer that is neither yes nor no
is "no verdict" (None), and the caller treats the candidate as it would without a judge.
"""

from __future__ import annotations

import asyncio
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Literal

import orjson

from deja.chat.judge import judge_messages
from deja.errors import DejaError
from deja.observability.metrics import Metrics
from deja.upstream.upstream import Upstream

__all__ = [
    "JUDGE_PATH",
    "Judge",
    "JudgeMode",
    "parse_verdict",
]

JUDGE_PATH = "/v1/chat/completions"

JudgeMode = Literal["off", "sync", "async"]

_YES = frozenset({"yes", "y", "sí", "si", "true"})
_NO = frozenset({"no", "n", "false"})
_FIRST_WORD = re.compile(r"\w+")

#: (model, normalised query, normalised cached question)
_Key = tuple[str, str, str]


def parse_verdict(content: str) -> bool | None:
    """The verdict in a judge's answer: its first word, case-insensitive; None when it is
    neither a yes ("yes", "y", "sí", "si", "true") nor a no ("no", "n", "false").

    Punctuation around the word is ignored ("Yes." is a yes): models add it despite the prompt.
    """
    match = _FIRST_WORD.search(content)
    if match is None:
        return None
    word = match.group(0).casefold()
    if word in _YES:
        return True
    if word in _NO:
        return False
    return None


def _normalise(text: str) -> str:
    """Case and whitespace do not change what a question asks: one cache entry for all."""
    return " ".join(text.casefold().split())


def _read_reply(body: bytes) -> tuple[str | None, int]:
    """``choices[0].message.content`` (None when absent or not a string) and the tokens the
    reply's ``usage`` reports (prompt + completion, 0 when absent)."""
    try:
        parsed: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, 0
    if not isinstance(parsed, dict):
        return None, 0
    tokens = 0
    usage = parsed.get("usage")
    if isinstance(usage, dict):
        for field in ("prompt_tokens", "completion_tokens"):
            value = usage.get(field)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                tokens += value
    content: Any = None
    choices = parsed.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        if isinstance(message, dict):
            content = message.get("content")
    return (content if isinstance(content, str) else None), tokens


class Judge:
    """Asks a replica whether two questions ask the same thing, and remembers the answer.

    Verdicts (True/False, never None) live in a bounded LRU keyed by the model and both
    questions, case- and whitespace-normalised: a verdict is the model's, so another model asks
    again. Callers look in :meth:`known` first; :meth:`verdict` always makes a call.
    """

    def __init__(
        self,
        upstream: Upstream,
        metrics: Metrics,
        *,
        mode: JudgeMode,
        timeout: float,
        cache_size: int = 4096,
    ) -> None:
        if cache_size < 0:
            raise ValueError("cache_size must be >= 0")
        self.upstream = upstream
        self.metrics = metrics
        self.mode: JudgeMode = mode
        self.timeout = timeout
        self.cache_size = cache_size
        #: Judge calls made (errors included) and the tokens they spent, for benchmarks.
        self.calls = 0
        self.tokens = 0
        self._verdicts: OrderedDict[_Key, bool] = OrderedDict()
        self._pending: set[_Key] = set()

    @staticmethod
    def _key(query: str, cached: str, model: str) -> _Key:
        return (model, _normalise(query), _normalise(cached))

    def known(self, query: str, cached: str, model: str) -> bool | None:
        """The remembered verdict for this pair, or None; never makes a call."""
        key = self._key(query, cached, model)
        found = self._verdicts.get(key)
        if found is not None:
            self._verdicts.move_to_end(key)
        return found

    def _remember(self, key: _Key, verdict: bool) -> None:
        if self.cache_size == 0:
            return
        self._verdicts[key] = verdict
        self._verdicts.move_to_end(key)
        while len(self._verdicts) > self.cache_size:
            self._verdicts.popitem(last=False)

    def _record(self, outcome: str, tokens: int) -> None:
        self.calls += 1
        self.metrics.count(self.metrics.judge_calls, self.mode, outcome)
        if tokens:
            self.tokens += tokens
            self.metrics.judge_tokens.inc(tokens)

    async def verdict(self, query: str, cached: str, model: str) -> bool | None:
        """Ask one replica serving ``model``: True (same question), False, or None when there
        is no verdict (mode ``off``, a replica error, the timeout, an unclear answer).

        Never raises a ``DejaError`` or ``TimeoutError``; a cancellation still propagates. A
        True/False verdict is remembered for :meth:`known`.
        """
        if self.mode == "off":
            return None
        body = orjson.dumps(
            {
                "model": model,
                "messages": judge_messages(query, cached),
                "max_tokens": 1,
                "temperature": 0,
            }
        )
        try:
            async with asyncio.timeout(self.timeout):
                reply = await self.upstream.complete(
                    path=JUDGE_PATH, body=body, model=model, prefix_key=None
                )
        except (DejaError, TimeoutError):
            self._record("error", 0)
            return None
        content, tokens = _read_reply(reply.body)
        result = None if content is None else parse_verdict(content)
        if result is None:
            self._record("unclear", tokens)
            return None
        self._record("yes" if result else "no", tokens)
        self._remember(self._key(query, cached, model), result)
        return result

    def judge_later(
        self,
        query: str,
        cached: str,
        model: str,
        spawn: Callable[[Coroutine[Any, Any, None]], object],
        then: Callable[[bool], Awaitable[object]] | None = None,
    ) -> None:
        """Async mode: have ``spawn`` run :meth:`verdict` in the background, so its result is
        :meth:`known` next time, and then ``then`` with the verdict (learning, promotion).
        Nothing is spawned in mode ``off``, when the verdict is already known, or while a call
        for the same pair is pending; ``spawn`` must run the coroutine (e.g. the gateway's
        background task set), or the pair stays pending.
        """
        if self.mode == "off":
            return
        key = self._key(query, cached, model)
        if key in self._pending or key in self._verdicts:
            return
        self._pending.add(key)
        job = self._in_background(key, query, cached, model, then)
        try:
            spawn(job)
        except BaseException:
            self._pending.discard(key)
            job.close()
            raise

    async def _in_background(
        self,
        key: _Key,
        query: str,
        cached: str,
        model: str,
        then: Callable[[bool], Awaitable[object]] | None,
    ) -> None:
        try:
            same = await self.verdict(query, cached, model)
        finally:
            self._pending.discard(key)
        if same is not None and then is not None:
            await then(same)
