"""Request validation, part of admission (``middleware.admit``): enough to fail clearly (400
with ``param``), never more.

Unknown fields are not rejected: they travel to the replica untouched. Ranges are left to the
replica, whose own 400 is passed through.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from deja.cache.keys import Endpoint
from deja.corpus.names import CORPUS_NAME
from deja.errors import InvalidRequestError
from deja.request import CachePolicy, GatewayRequest, RagOnFailure

_NUMBER = (int, float)
_CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})

# field -> (accepted python types, human description); None is always accepted.
_COMMON_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "stream": ((bool,), "a boolean"),
    "n": ((int,), "an integer"),
    "temperature": (_NUMBER, "a number"),
    "top_p": (_NUMBER, "a number"),
    "max_tokens": ((int,), "an integer"),
    "seed": ((int,), "an integer"),
    "presence_penalty": (_NUMBER, "a number"),
    "frequency_penalty": (_NUMBER, "a number"),
    "logit_bias": ((dict,), "an object"),
    "stream_options": ((dict,), "an object"),
    "user": ((str,), "a string"),
    "stop": ((str, list), "a string or an array of strings"),
}
_CHAT_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "max_completion_tokens": ((int,), "an integer"),
    "logprobs": ((bool,), "a boolean"),
    "top_logprobs": ((int,), "an integer"),
    "tools": ((list,), "an array"),
    "tool_choice": ((str, dict), "a string or an object"),
    "response_format": ((dict,), "an object"),
    "parallel_tool_calls": ((bool,), "a boolean"),
}
_COMPLETION_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "logprobs": ((int,), "an integer"),
    "echo": ((bool,), "a boolean"),
    "suffix": ((str,), "a string"),
    "best_of": ((int,), "an integer"),
}


def parse_json(raw: bytes) -> dict[str, Any]:
    """Decode the body; anything but a JSON object is a 400."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequestError(
            f"We could not parse the JSON body of your request: {exc}"
        ) from exc
    if not isinstance(body, dict):
        raise InvalidRequestError("The request body must be a JSON object.")
    return body


def _check_type(body: Mapping[str, Any], name: str, types: tuple[type, ...], desc: str) -> None:
    value = body.get(name)
    if value is None:
        return
    is_bool = isinstance(value, bool)
    if not isinstance(value, types) or (is_bool and bool not in types):
        raise InvalidRequestError(
            f"Invalid type for '{name}': expected {desc}, got {type(value).__name__}.", param=name
        )


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise InvalidRequestError(
            "'messages' must be a non-empty array of message objects.", param="messages"
        )
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise InvalidRequestError(f"'{where}' must be an object.", param=where)
        role = message.get("role")
        if not isinstance(role, str) or role not in _CHAT_ROLES:
            raise InvalidRequestError(
                f"'{where}.role' must be one of {sorted(_CHAT_ROLES)}.", param=f"{where}.role"
            )
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise InvalidRequestError(
                f"'{where}.content' must be a string or an array of content parts.",
                param=f"{where}.content",
            )
        if isinstance(content, list):
            for j, part in enumerate(content):
                if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                    raise InvalidRequestError(
                        f"'{where}.content[{j}]' must be an object with a 'type'.",
                        param=f"{where}.content[{j}]",
                    )


def _prompt_count(prompt: Any) -> int:
    """How many prompts ``prompt`` holds; raises for anything the API does not accept."""
    if isinstance(prompt, str):
        return 1
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return len(prompt)
        if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            return 1
        if all(isinstance(p, list) and all(isinstance(t, int) for t in p) for p in prompt):
            return len(prompt)
    raise InvalidRequestError(
        "'prompt' must be a string, an array of strings, or token arrays.", param="prompt"
    )


def validate(
    endpoint: Endpoint,
    raw: bytes,
    *,
    tenant: str,
    policy: CachePolicy,
    prefix_override: str | None = None,
    namespace: str = "",
    cache: bool = True,
    tenant_threshold: float | None = None,
    share_prefix_cache: bool = False,
    promote: bool = True,
    request_id: str = "",
    corpus: str | None = None,
    model_corpus: Mapping[str, str] | None = None,
    default_corpus: str | None = None,
    context_id: str | None = None,
    rag_on_failure: RagOnFailure = "error",
    corpus_filter: str | None = None,
    deadline: float | None = None,
) -> GatewayRequest:
    """Parse and check one request body into a :class:`GatewayRequest`. ``corpus`` is the
    header's or the tenant's corpus; ``model_corpus`` the per-model defaults after it, then
    ``default_corpus``."""
    body = parse_json(raw)
    model = _check_model(body)
    _check_types(endpoint, body)
    cacheable = _check_choices(endpoint, body)
    stream = bool(body.get("stream"))
    options = body.get("stream_options") or {}
    if corpus is None:
        corpus = (model_corpus or {}).get(model, default_corpus)
    corpus = _check_corpus(corpus, endpoint)
    return GatewayRequest(
        endpoint=endpoint,
        body=body,
        raw=raw,
        model=model,
        stream=stream,
        include_usage=stream and bool(options.get("include_usage")),
        cacheable=cacheable,
        tenant=tenant,
        policy=policy,
        prefix_override=_check_header(prefix_override, "X-Prefix-Hash", 128),
        namespace=_check_namespace(namespace),
        cache=cache,
        tenant_threshold=tenant_threshold,
        share_prefix_cache=share_prefix_cache,
        promote=promote,
        request_id=request_id,
        corpus=corpus,
        context_id=_check_header(context_id, "X-Deja-Context-Id", 256),
        rag_on_failure=rag_on_failure,
        corpus_filter=_parse_corpus_filter(corpus_filter, corpus),
        deadline=deadline,
    )


def _check_model(body: Mapping[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequestError("you must provide a model parameter", param="model")
    return model


def _check_types(endpoint: Endpoint, body: Mapping[str, Any]) -> None:
    """The types of the fields the request names (a handful: those, not the whole table)."""
    specific = _CHAT_TYPES if endpoint == "chat" else _COMPLETION_TYPES
    for name in body:
        spec = _COMMON_TYPES.get(name) or specific.get(name)
        if spec is not None:
            _check_type(body, name, *spec)


def _check_choices(endpoint: Endpoint, body: Mapping[str, Any]) -> bool:
    """Check ``n`` and the messages or prompt; whether the answer may be cached (one choice
    for one prompt, no log-probabilities)."""
    n = body.get("n")
    n = 1 if n is None else n
    if n < 1:
        raise InvalidRequestError("'n' must be at least 1.", param="n")
    if endpoint == "chat":
        _check_messages(body.get("messages"))
        prompts = 1
        wants_logprobs = bool(body.get("logprobs") or body.get("top_logprobs"))
    else:
        if "prompt" not in body:
            raise InvalidRequestError("you must provide a prompt parameter", param="prompt")
        prompts = _prompt_count(body["prompt"])
        wants_logprobs = body.get("logprobs") is not None or bool(body.get("echo"))
    return n == 1 and prompts == 1 and not wants_logprobs


def _check_namespace(value: str) -> str:
    value = value.strip()
    if len(value) > 128 or not value.isprintable():
        raise InvalidRequestError(
            "X-Deja-Namespace must be at most 128 printable characters.", param="X-Deja-Namespace"
        )
    return value


def _check_header(value: str | None, header: str, limit: int) -> str | None:
    """A free-form header value (``X-Prefix-Hash``, ``X-Deja-Context-Id``): 1 to ``limit``
    printable characters once stripped; None when the header is absent."""
    if value is None:
        return None
    value = value.strip()
    if not value or len(value) > limit or not value.isprintable():
        raise InvalidRequestError(f"{header} must be 1-{limit} printable characters.", param=header)
    return value


def _check_corpus(value: str | None, endpoint: Endpoint) -> str | None:
    if value is None:
        return None
    value = value.strip()
    if not CORPUS_NAME.fullmatch(value):
        raise InvalidRequestError(
            "X-Deja-Corpus must be a corpus name: 1-64 letters, digits, '.', '_' or '-'.",
            param="X-Deja-Corpus",
        )
    if endpoint != "chat":
        raise InvalidRequestError(
            "Retrieval (X-Deja-Corpus) applies to /v1/chat/completions only.",
            param="X-Deja-Corpus",
        )
    return value


_FILTER_PAIR = re.compile(r"([A-Za-z0-9_.-]{1,64})=([^,=]{1,256})")


def _parse_corpus_filter(value: str | None, corpus: str | None) -> tuple[tuple[str, str], ...]:
    """``key=value, key2=value2`` → sorted pairs (sorted: one scope however they are written)."""
    if value is None:
        return ()
    where = "X-Deja-Corpus-Filter"
    if corpus is None:
        raise InvalidRequestError(f"{where} needs a corpus (X-Deja-Corpus).", param=where)
    pairs: dict[str, str] = {}
    for part in value.split(","):
        match = _FILTER_PAIR.fullmatch(part.strip())
        if match is None or not match.group(2).strip().isprintable():
            raise InvalidRequestError(
                f"{where} must be key=value pairs separated by commas (at most 8).", param=where
            )
        pairs[match.group(1)] = match.group(2).strip()
    if len(pairs) > 8:
        raise InvalidRequestError(f"{where} takes at most 8 key=value pairs.", param=where)
    return tuple(sorted(pairs.items()))
