"""The simulator's answer to a "model as judge" request from the semantic cache.

deja may ask the replicas whether two questions ask for the same thing (``deja.semantic.judge``).
A real model reads the questions; the simulator cannot, so it applies one documented,
deterministic rule instead. The rule exists so that tests can check the *mechanics* of judging
(the call, the one-token answer, the counting, the remembered verdict); it says nothing about how
good a real model's verdicts are, and no result obtained with it is a claim of quality.

**Recognising a judge request.** A chat request whose messages are exactly a system message and
a user message, where

* the system message's content starts with ``deja.chat.judge.JUDGE_MARKER`` ("You decide
  whether two questions ask for the same information"), the first sentence of the judge prompt
  the gateway sends (one copy, in the domain, imported by both);
* the user message's content is ``"Question A: <a>\\nQuestion B: <b>"``.

**The rule.** Let A and B be the sets of lower-cased ``\\w+`` words of the two questions. The
answer is ``"yes"`` when their Jaccard similarity ``|A ∩ B| / |A ∪ B|`` is at least
:data:`JACCARD_YES` (0.6), else ``"no"`` (two questions without any word: ``"no"``). The answer is
one token; its finish reason is ``"length"`` when ``max_tokens`` is 1 (a real model would have
gone on to its end-of-sequence token) and ``"stop"`` otherwise. Prompt tokens, the prefix cache
and timing are whatever the simulator does for any chat request.

**With labels** (``--judge-labels``): a pair of labelled questions is answered by cluster, by a
judge of a chosen accuracy (:mod:`sim.labels`); the rule above answers the other pairs.
"""

from __future__ import annotations

import re
from typing import Any

from deja.chat.judge import judge_questions
from sim.engine import Generation
from sim.labels import Labels

__all__ = [
    "JACCARD_YES",
    "jaccard",
    "judge_answer",
    "judge_generation",
]

#: Word-set Jaccard similarity at or above which the simulated judge says "yes".
JACCARD_YES = 0.6

_WORD_RE = re.compile(r"\w+")


def jaccard(a: str, b: str) -> float:
    """Jaccard similarity of the lower-cased ``\\w+`` word sets of ``a`` and ``b`` (0.0 when
    neither has a word)."""
    words_a = set(_WORD_RE.findall(a.lower()))
    words_b = set(_WORD_RE.findall(b.lower()))
    union = words_a | words_b
    if not union:
        return 0.0
    return len(words_a & words_b) / len(union)


def judge_answer(a: str, b: str) -> str:
    """``"yes"`` when the word sets overlap enough (:data:`JACCARD_YES`), else ``"no"``."""
    return "yes" if jaccard(a, b) >= JACCARD_YES else "no"


def judge_generation(
    messages: Any, max_tokens: int | None, labels: Labels | None = None
) -> Generation | None:
    """The one-token generation answering a judge request, or None for any other request;
    with ``labels``, a pair of labelled questions is answered by :mod:`sim.labels`."""
    questions = judge_questions(messages)
    if questions is None:
        return None
    verdict = labels.verdict(*questions) if labels is not None else None
    finish = "length" if max_tokens == 1 else "stop"
    return Generation(pieces=[verdict or judge_answer(*questions)], finish_reason=finish)
