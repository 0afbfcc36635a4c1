"""Validation failures become OpenAI-shaped errors with the right status and param."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from deja.errors import (
    BodyReadTimeoutError,
    BodyTooLargeError,
    DeadlineExceededError,
    InvalidRequestError,
    ModelNotFoundError,
    NoHealthyReplicaError,
    OverloadedError,
    QueueFullError,
    ReplicaConnectError,
    UpstreamClientError,
    UpstreamError,
    UpstreamServerError,
    UpstreamTimeoutError,
    UpstreamUnreachableError,
)
from deja.request import CachePolicy
from middleware.errors import error_response, public_message
from middleware.validate import validate

POLICY = CachePolicy()
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def check(endpoint: str, body: Any) -> InvalidRequestError:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    with pytest.raises(InvalidRequestError) as info:
        validate(endpoint, raw, tenant="t", policy=POLICY)  # type: ignore[arg-type]
    return info.value


def test_malformed_json_and_non_objects() -> None:
    assert "parse the JSON" in check("chat", b"{not json").message
    assert check("chat", b"[1,2]").message.startswith("The request body must be")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": CHAT["messages"]}, "model"),
        ({**CHAT, "model": 3}, "model"),
        ({"model": "m"}, "messages"),
        ({"model": "m", "messages": []}, "messages"),
        ({"model": "m", "messages": ["hi"]}, "messages[0]"),
        ({"model": "m", "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"model": "m", "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({"model": "m", "messages": [{"role": "user", "content": [5]}]}, "messages[0].content[0]"),
        ({**CHAT, "temperature": "hot"}, "temperature"),
        ({**CHAT, "stream": "yes"}, "stream"),
        ({**CHAT, "max_tokens": 1.5}, "max_tokens"),
        ({**CHAT, "n": True}, "n"),
        ({**CHAT, "n": 0}, "n"),
        ({**CHAT, "stop": 7}, "stop"),
    ],
)
def test_chat_field_errors_name_the_param(body: dict[str, Any], param: str) -> None:
    assert check("chat", body).param == param


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m"}, "prompt"),
        ({"model": "m", "prompt": 5}, "prompt"),
        ({"model": "m", "prompt": [1, "a"]}, "prompt"),
        ({"model": "m", "prompt": "x", "echo": 1}, "echo"),
    ],
)
def test_completion_field_errors(body: dict[str, Any], param: str) -> None:
    assert check("completion", body).param == param


def test_unknown_fields_pass_and_raw_bytes_are_kept() -> None:
    raw = orjson.dumps({**CHAT, "top_k": 5, "guided_json": {"type": "object"}})
    req = validate("chat", raw, tenant="t", policy=POLICY)
    assert req.raw is raw and req.body["top_k"] == 5


def test_cacheability() -> None:
    def cacheable(endpoint: str, body: dict[str, Any]) -> bool:
        return validate(endpoint, orjson.dumps(body), tenant="t", policy=POLICY).cacheable  # type: ignore[arg-type]

    assert cacheable("chat", CHAT)
    assert not cacheable("chat", {**CHAT, "n": 2})
    assert not cacheable("chat", {**CHAT, "logprobs": True})
    assert cacheable("completion", {"model": "m", "prompt": "x"})
    assert cacheable("completion", {"model": "m", "prompt": [1, 2, 3]})
    assert not cacheable("completion", {"model": "m", "prompt": ["a", "b"]})
    assert not cacheable("completion", {"model": "m", "prompt": "x", "logprobs": 2})


def test_stream_flags() -> None:
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    req = validate("chat", orjson.dumps(body), tenant="t", policy=POLICY)
    assert req.stream and req.include_usage


@pytest.mark.parametrize(
    ("error", "status", "type_", "code"),
    [
        (InvalidRequestError("x", param="model"), 400, "invalid_request_error", None),
        (BodyTooLargeError("x"), 413, "invalid_request_error", "request_too_large"),
        (ModelNotFoundError("x", param="model"), 404, "invalid_request_error", "model_not_found"),
        (NoHealthyReplicaError("x"), 503, "service_unavailable", "no_healthy_replica"),
        (
            UpstreamServerError("x", replica_status=500),
            502,
            "upstream_error",
            "upstream_server_error",
        ),
        (UpstreamTimeoutError("x"), 504, "timeout", "upstream_timeout"),
        (DeadlineExceededError("x"), 504, "timeout", "deadline_exceeded"),
        (OverloadedError("x", retry_after=3), 429, "requests", "overloaded"),
        (QueueFullError("x", retry_after=3), 503, "service_unavailable", "queue_full"),
        (BodyReadTimeoutError("x"), 408, "invalid_request_error", "request_timeout"),
    ],
)
def test_error_mapping(error: Any, status: int, type_: str, code: str | None) -> None:
    response = error_response(error)
    assert response.status_code == status
    # A replica failure reads in public words (issue 19: no replica address on the wire).
    message = public_message(error) if isinstance(error, UpstreamError) else "x"
    assert orjson.loads(bytes(response.body)) == {
        "error": {"message": message, "type": type_, "param": error.param, "code": code}
    }


def test_a_replica_failure_names_no_replica() -> None:
    cut = UpstreamUnreachableError("replica 10.0.0.7:8000 dropped the connection mid-answer")
    server = UpstreamServerError("replica 10.0.0.7:8000 failed with 500: boom", replica_status=500)
    for error in (cut, server, ReplicaConnectError("replica 10.0.0.7:8000 is unreachable")):
        assert "10.0.0.7" not in bytes(error_response(error).body).decode()
    assert public_message(server) == "The model replica failed with 500: boom"
    assert "mid-answer" in public_message(cut)


def test_overload_and_body_timeout_headers() -> None:
    assert error_response(OverloadedError("x", retry_after=3)).headers["retry-after"] == "3"
    assert error_response(QueueFullError("x", retry_after=2)).headers["retry-after"] == "2"
    assert error_response(BodyReadTimeoutError("x")).headers["connection"] == "close"


def test_replica_client_errors_pass_through_verbatim() -> None:
    original = {
        "error": {"message": "too long", "type": "BadRequestError", "param": None, "code": 400}
    }
    response = error_response(UpstreamClientError(429, original, {"retry-after": "2"}))
    assert (response.status_code, orjson.loads(bytes(response.body))) == (429, original)
    assert response.headers["retry-after"] == "2"


def test_internal_error_is_openai_shaped_without_details() -> None:
    response = error_response(RuntimeError("secret detail"), "test")
    body = bytes(response.body).decode()
    assert response.status_code == 500 and "Traceback" not in body and "secret" not in body
    assert set(orjson.loads(body)["error"]) == {"message", "type", "param", "code"}
