"""The simulator's answer to a "model as judge" request from the semantic cache.

deja may ask the replicas whether two questions ask for the same thing (``deja.semantic.judge``).
A real model reads the questions; the simulator cannot, so it applies one documented,
deterministic rule instead. The rule exists so that tests can check the *mechanics* of judging
(the call, the one-token answer, the counting, the remembered verdict); it says nothing about how
good a real model's verdicts are, and no result obtained with it is a claim of quality.

**Recognising a judge request.** A chat request whose messages are exactly a system message and
a user message, where

* the system message's content starts with :data:`JUDGE_MARKER` ("You decide whether two
  questions ask for the same information"). The simulator imports nothing from outside
  ``deja.sim``, so this is its own copy of the first sentence of
  ``deja.semantic.judge.JUDGE_SYSTEM_PROMPT``: the two must match, or judge requests are answered
  like any other prompt;
* the user message's content is ``"Question A: <a>\\nQuestion B: <b>"``.

**The rule.** Let A and B be the sets of lower-cased ``\\w+`` words of the two questions. The
answer is ``"yes"`` when their Jaccard similarity ``|A ∩ B| / |A ∪ B|`` is at least
:data:`JACCARD_YES` (0.6), else ``"no"`` (two questions without any word: ``"no"``). The answer is
one token; its finish reason is ``"length"`` when ``max_tokens`` is 1 (a real model would have
gone on to its end-of-sequence token) and ``"stop"`` otherwise. Prompt tokens, the prefix cache
and timing are whatever the simulator does for any chat request.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from deja.sim.engine import Generation

__all__ = [
    "JACCARD_YES",
    "JUDGE_MARKER",
    "jaccard",
    "judge_answer",
    "judge_generation",
    "judge_questions",
]

#: Must match the first sentence of ``deja.semantic.judge.JUDGE_SYSTEM_PROMPT``.
JUDGE_MARKER = "You decide whether two questions ask for the same information"
#: Word-set Jaccard similarity at or above which the simulated judge says "yes".
JACCARD_YES = 0.6

_QUESTIONS_RE = re.compile(r"Question A: (.*)\nQuestion B: (.*)", re.DOTALL)
_WORD_RE = re.compile(r"\w+")


def judge_questions(messages: Any) -> tuple[str, str] | None:
    """The two questions of a judge request, or None when ``messages`` is not one."""
    if not isinstance(messages, list) or len(messages) != 2:
        return None
    system, user = messages
    if not (isinstance(system, Mapping) and isinstance(user, Mapping)):
        return None
    if system.get("role") != "system" or user.get("role") != "user":
        return None
    instruction = system.get("content")
    content = user.get("content")
    if not isinstance(instruction, str) or not instruction.startswith(JUDGE_MARKER):
        return None
    if not isinstance(content, str):
        return None
    match = _QUESTIONS_RE.fullmatch(content)
    if match is None:
        return None
    return match.group(1), match.group(2)


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


def judge_generation(messages: Any, max_tokens: int | None) -> Generation | None:
    """The one-token generation answering a judge request, or None for any other request."""
    questions = judge_questions(messages)
    if questions is None:
        return None
    finish = "length" if max_tokens == 1 else "stop"
    return Generation(pieces=[judge_answer(*questions)], finish_reason=finish)
