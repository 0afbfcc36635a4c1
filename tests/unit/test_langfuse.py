"""Langfuse settings and the request span's attributes (the wire format is checked end to end
against a local OTLP receiver in tests/e2e/test_langfuse.py)."""

from __future__ import annotations

import base64

import pytest

from config.settings import load_settings
from deja.errors import ConfigError
from deja.observability.langfuse import (
    basic_auth,
    langfuse_from,
    request_attributes,
    tokens_saved,
    traces_endpoint,
)
from deja.request import CachePolicy, GatewayRequest

LANGFUSE = {
    "DEJA_LANGFUSE_HOST": "https://langfuse.example",
    "DEJA_LANGFUSE_PUBLIC_KEY": "pk-lf-1",
    "DEJA_LANGFUSE_SECRET_KEY": "sk-lf-2",
}


def request(**extra: object) -> GatewayRequest:
    fields: dict[str, object] = {
        "endpoint": "completion",
        "body": {},
        "raw": b"{}",
        "model": "m",
        "stream": False,
        "include_usage": False,
        "cacheable": True,
        "tenant": "t",
        "policy": CachePolicy(),
        **extra,
    }
    return GatewayRequest(**fields)  # type: ignore[arg-type]


def test_langfuse_needs_host_and_both_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    assert langfuse_from(load_settings()) is None  # off by default
    for name in LANGFUSE:
        for other, value in LANGFUSE.items():
            if other != name:
                monkeypatch.setenv(other, value)
            else:
                monkeypatch.delenv(other, raising=False)
        with pytest.raises(ConfigError, match="needs all three"):
            load_settings()
    for name, value in LANGFUSE.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert settings.masked()["langfuse_secret_key"] == "********"
    assert langfuse_from(settings) is not None
    monkeypatch.setenv("DEJA_LANGFUSE_HOST", "langfuse.example")
    with pytest.raises(ConfigError, match="langfuse_host"):
        load_settings()


def test_endpoint_and_basic_auth() -> None:
    assert traces_endpoint("https://cloud.langfuse.com/") == (
        "https://cloud.langfuse.com/api/public/otel/v1/traces"
    )
    header = basic_auth("pk-lf-1", "sk-lf-2")
    assert header.startswith("Basic ")
    assert base64.b64decode(header.removeprefix("Basic ")) == b"pk-lf-1:sk-lf-2"


def test_tokens_saved_only_when_the_cache_answered() -> None:
    usage = {"prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42}
    assert tokens_saved("exact", usage) == tokens_saved("semantic", usage) == 42
    assert tokens_saved("miss", usage) == tokens_saved("bypass", usage) == 0
    assert tokens_saved("exact", None) == 0
    assert tokens_saved("exact", {"prompt_tokens": True, "completion_tokens": "3"}) == 0


def test_a_failed_bypassed_request_is_a_generation_at_error_level() -> None:
    attrs = request_attributes(request(), outcome="bypass", status=503, replica=None)
    meta = "langfuse.trace.metadata."
    assert attrs["langfuse.observation.type"] == "generation"
    assert attrs["langfuse.observation.level"] == "ERROR"
    assert attrs[meta + "cache_layer"] == "none" and attrs[meta + "cache_hit"] is False
    assert attrs["gen_ai.operation.name"] == "text_completion"
    assert attrs["langfuse.trace.name"] == "deja.completion"
    assert meta + "replica" not in attrs and meta + "similarity" not in attrs
    assert (
        request_attributes(request(), outcome="miss", status=400)["langfuse.observation.level"]
        == "WARNING"
    )


def test_a_miss_with_usage_reports_it_as_usage_and_a_hit_never_does() -> None:
    usage = {"prompt_tokens": 5, "completion_tokens": 7}
    miss = request_attributes(request(), outcome="miss", status=200, usage=usage)
    assert (miss["gen_ai.usage.input_tokens"], miss["gen_ai.usage.output_tokens"]) == (5, 7)
    hit = request_attributes(request(), outcome="coalesced", status=200, usage=usage)
    assert not [k for k in hit if k.startswith("gen_ai.usage.")]
    assert hit["langfuse.trace.metadata.cache_layer"] == "single_flight"
    assert hit["langfuse.trace.metadata.tokens_saved"] == 12
