"""The judge prompt: how the semantic cache asks the served model whether two questions ask for
the same information (``deja.semantic.judge``), and how a judge request is recognised (the
simulator answers those by a documented rule, ``sim.judge``). One copy, imported by both."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: The first sentence of the instruction: what marks a judge request.
JUDGE_MARKER = "You decide whether two questions ask for the same information"
#: The fixed instruction. Never vary it per request: a constant prefix is what keeps it
#: prefix-cached on the replicas.
JUDGE_SYSTEM_PROMPT = (
    f"{JUDGE_MARKER}, so that one answer serves both. Reply with exactly one word: yes or no."
)

_QUESTIONS_RE = re.compile(r"Question A: (.*)\nQuestion B: (.*)", re.DOTALL)


def judge_messages(query: str, cached: str) -> list[dict[str, str]]:
    """The chat messages of one judge request: the constant system prompt, then both questions.

    Whitespace inside each question is collapsed to single spaces so that the user message is
    always exactly two lines, one per question, whatever newlines the questions carry.
    """
    a = " ".join(query.split())
    b = " ".join(cached.split())
    return [
        {"role": "system", "content": JUDGE_SYSTEM_PROMPT},
        {"role": "user", "content": f"Question A: {a}\nQuestion B: {b}"},
    ]


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
