"""Every request as a Langfuse trace, through Langfuse's OpenTelemetry endpoint.

Why OTLP and not the ``langfuse`` SDK: the gateway already builds one span per request; the
OTLP/HTTP exporter sends it from the batch span processor's own thread, so the request path
only pays for the span and its attributes (measured by ``bench/tracing.py``) and needs no new
dependency. Langfuse maps OTLP spans to its data model by attribute name; the names used here
are the ones its documentation lists for that endpoint ("Property Mapping",
langfuse.com/integrations/native/opentelemetry) and its Python SDK writes
(``LangfuseOtelSpanAttributes``):

- ``langfuse.trace.name``, ``langfuse.trace.tags``: the trace's name and tags;
- ``langfuse.trace.metadata.<key>``: top-level trace metadata, the keys Langfuse can filter on
  (values as the SDK writes them: strings and integers as they are, anything else as JSON);
- ``langfuse.observation.type``: ``generation`` when a replica answered, ``span`` when the
  cache did (the explicit type outranks the model-based guess, so a hit is never costed as
  a model call), and ``langfuse.observation.level``;
- ``gen_ai.request.model`` (the model), ``gen_ai.operation.name``; ``gen_ai.usage.*`` only
  for tokens a replica really processed: Langfuse reads every ``gen_ai.usage.*`` key as usage,
  so tokens saved by a hit go in metadata (``tokens_saved``), never there.

Never a prompt, an answer or a key: only what the access log already carries.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.trace.export import SpanExporter

from config.settings import Settings
from deja.request import GatewayRequest, Outcome

log = logging.getLogger("deja")

#: Langfuse's OTLP/HTTP traces path, under its host (HTTP/protobuf only; no gRPC).
OTLP_TRACES_PATH = "/api/public/otel/v1/traces"
#: An export that cannot reach Langfuse gives up after this long (it runs in the exporter's
#: thread; only a shutdown waits for it).
EXPORT_TIMEOUT_SECONDS = 5.0

_LAYERS = {
    Outcome.EXACT.value: "exact",
    Outcome.SEMANTIC.value: "semantic",
    Outcome.COALESCED.value: "single_flight",
}
_SERVED_FROM_CACHE = frozenset(_LAYERS)


def traces_endpoint(host: str) -> str:
    """``https://cloud.langfuse.com`` → its OTLP traces endpoint."""
    return host.rstrip("/") + OTLP_TRACES_PATH


def basic_auth(public_key: str, secret_key: str) -> str:
    """The ``Authorization`` header Langfuse's OTLP endpoint expects: Basic base64(pk:sk)."""
    return "Basic " + base64.b64encode(f"{public_key}:{secret_key}".encode()).decode()


def langfuse_exporter(host: str, public_key: str, secret_key: str) -> SpanExporter:
    """An OTLP/HTTP (protobuf) span exporter that sends to Langfuse at ``host``."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(
        endpoint=traces_endpoint(host),
        headers={"Authorization": basic_auth(public_key, secret_key)},
        timeout=EXPORT_TIMEOUT_SECONDS,
    )


def langfuse_from(settings: Settings) -> SpanExporter | None:
    """Langfuse's span exporter when ``langfuse_host`` and its keys are set (the settings
    model refuses one without the others)."""
    host, public, secret = (
        settings.langfuse_host,
        settings.langfuse_public_key,
        settings.langfuse_secret_key,
    )
    if host is None or public is None or secret is None:
        return None
    log.info("traces go to Langfuse at %s", traces_endpoint(host))
    return langfuse_exporter(host, public, secret.get_secret_value())


def tokens_saved(outcome: str, usage: Mapping[str, Any] | None) -> int:
    """Prompt + completion tokens a replica did not process because the cache answered (the
    usage of the request that first produced the answer); 0 for anything a replica answered."""
    if outcome not in _SERVED_FROM_CACHE or not usage:
        return 0
    total = 0
    for name in ("prompt_tokens", "completion_tokens"):
        value = usage.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            total += value
    return total


def request_attributes(
    req: GatewayRequest,
    *,
    outcome: str,
    status: int,
    similarity: float | None = None,
    verifier_score: float | None = None,
    entry: str | None = None,
    replica: str | None = None,
    usage: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The request span's attributes: OpenTelemetry GenAI, ``deja.*``, and what Langfuse maps
    to its trace (None values are for the caller to drop)."""
    from_cache = outcome in _SERVED_FROM_CACHE
    saved = tokens_saved(outcome, usage)
    metadata = {
        "cache_outcome": outcome,
        "cache_layer": _LAYERS.get(outcome, "none"),
        "cache_hit": from_cache,
        "similarity": _score(similarity),
        "verifier_score": _score(verifier_score),
        "tenant": req.tenant,
        "model": req.model,
        "tokens_saved": saved,
        "namespace": req.namespace or None,
        "entry_id": entry,
        "replica": replica,
        "request_id": req.request_id or None,
        "status": status,
        "stream": req.stream,
    }
    attributes: dict[str, Any] = {
        "langfuse.trace.name": f"deja.{req.endpoint}",
        "langfuse.trace.tags": [f"cache:{outcome}", f"tenant:{req.tenant}"],
        "langfuse.observation.type": "span" if from_cache else "generation",
        "langfuse.observation.level": _level(status),
        "gen_ai.operation.name": "chat" if req.endpoint == "chat" else "text_completion",
        "gen_ai.request.model": req.model,
        "deja.cache.outcome": outcome,
        "deja.cache.similarity": similarity,
        "deja.cache.verifier_score": verifier_score,
        "deja.cache.entry_id": entry,
        "deja.cache.tokens_saved": saved,
        "deja.replica": replica,
        "deja.tenant": req.tenant,
        "http.response.status_code": status,
    }
    if not from_cache and usage:
        attributes["gen_ai.usage.input_tokens"] = usage.get("prompt_tokens")
        attributes["gen_ai.usage.output_tokens"] = usage.get("completion_tokens")
    for key, value in metadata.items():
        if value is not None:
            attributes[f"langfuse.trace.metadata.{key}"] = _metadata_value(value)
    return attributes


def _score(value: float | None) -> str | None:
    return None if value is None else f"{value:.4f}"


def _metadata_value(value: Any) -> Any:
    """As Langfuse's SDK writes metadata: strings and integers (bools too) as they are,
    anything else as JSON."""
    if isinstance(value, str | int):
        return value
    return json.dumps(value)


def _level(status: int) -> str:
    if status >= 500:
        return "ERROR"
    if status >= 400:
        return "WARNING"
    return "DEFAULT"
