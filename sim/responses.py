"""OpenAI-shaped response bodies of the simulated replica.

:class:`Job` is a parsed, validated generation request; the builders here turn it into
``chat.completion`` / ``text_completion`` bodies and their streamed chunks.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from starlette.responses import Response

from sim.engine import Generation, RenderedPrompt

__all__ = [
    "Job",
    "Kind",
    "completion_body",
    "error_body",
    "json_response",
    "response_head",
    "stream_chunk",
    "usage_chunk",
]

Kind = Literal["chat", "completion"]


@dataclass
class Job:
    """A parsed, validated generation request."""

    kind: Kind
    prompts: list[RenderedPrompt]
    generations: list[Generation]  # one per choice, index = prompt_idx * n + j
    n: int
    stream: bool
    include_usage: bool
    prompt_tokens: int = 0
    cached_tokens: int = 0
    prompt_cached: list[int] = field(default_factory=list)
    """Prefix-cache hit of each prompt, in tokens."""

    def by_prompt(self) -> Iterator[tuple[RenderedPrompt, int, list[Generation]]]:
        """Each prompt with its cache hit and its ``n`` generations."""
        for i, prompt in enumerate(self.prompts):
            cached = self.prompt_cached[i] if i < len(self.prompt_cached) else 0
            yield prompt, cached, self.generations[i * self.n : (i + 1) * self.n]

    def cut_to(self, outputs: list[int]) -> None:
        """Keep only the tokens the engine produced (a sequence cut short because it could
        not fit in the KV cache ends early, with ``finish_reason="length"``)."""
        for i, (gen, produced) in enumerate(zip(self.generations, outputs, strict=True)):
            if produced < gen.num_tokens:
                pieces = gen.pieces[:produced]
                if pieces:
                    pieces[-1] = pieces[-1].rstrip()
                self.generations[i] = Generation(pieces=pieces, finish_reason="length")

    @property
    def completion_tokens(self) -> int:
        return sum(g.num_tokens for g in self.generations)

    def usage(self) -> dict[str, Any]:
        completion = self.completion_tokens
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }


def json_response(
    obj: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(orjson.dumps(obj), status, headers=headers, media_type="application/json")


def error_body(
    message: str,
    type_: str = "invalid_request_error",
    param: str | None = None,
    code: str | int | None = None,
) -> dict[str, Any]:
    """An OpenAI error body: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def response_head(kind: Kind, model: str, *, chunk: bool) -> dict[str, Any]:
    """``id``, ``object``, ``created`` and ``model`` of a fresh response (new id, now)."""
    prefix = "chatcmpl-" if kind == "chat" else "cmpl-"
    if kind == "chat":
        obj = "chat.completion.chunk" if chunk else "chat.completion"
    else:
        obj = "text_completion"
    return {
        "id": prefix + uuid.uuid4().hex,
        "object": obj,
        "created": int(time.time()),
        "model": model,
    }


def completion_body(job: Job, model: str) -> dict[str, Any]:
    """The whole non-streamed response body of ``job``."""
    body = response_head(job.kind, model, chunk=False)
    choices: list[dict[str, Any]] = []
    for index, gen in enumerate(job.generations):
        if job.kind == "chat":
            choices.append(
                {
                    "index": index,
                    "message": {"role": "assistant", "content": gen.text},
                    "logprobs": None,
                    "finish_reason": gen.finish_reason,
                }
            )
        else:
            choices.append(
                {
                    "index": index,
                    "text": gen.text,
                    "logprobs": None,
                    "finish_reason": gen.finish_reason,
                }
            )
    body["choices"] = choices
    body["usage"] = job.usage()
    return body


def stream_chunk(
    head: Mapping[str, Any], chat: bool, index: int, piece: str | None, finish: str | None
) -> dict[str, Any]:
    """One streamed chunk of choice ``index``.

    For chat: ``piece`` and ``finish`` both None is the opening role delta; a ``piece``
    is a content delta; a ``finish`` alone is the closing (empty) delta.
    """
    choice: dict[str, Any] = {"index": index}
    if chat:
        if piece is None and finish is None:
            choice["delta"] = {"role": "assistant", "content": ""}
        elif piece is not None:
            choice["delta"] = {"content": piece}
        else:
            choice["delta"] = {}
    else:
        choice["text"] = piece or ""
    choice["logprobs"] = None
    choice["finish_reason"] = finish
    return {**head, "choices": [choice]}


def usage_chunk(head: Mapping[str, Any], job: Job) -> dict[str, Any]:
    """The final ``stream_options.include_usage`` chunk: no choices, the usage."""
    return {**head, "choices": [], "usage": job.usage()}
