"""What is recorded once per request: metrics, the request span's attributes, the access log."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson
from opentelemetry.trace import Span

from deja.observability.accesslog import AccessLog
from deja.observability.langfuse import request_attributes
from deja.observability.metrics import Metrics
from deja.observability.tracing import set_attributes
from deja.request import GatewayRequest
from middleware.lookup import Lookup


@dataclass(slots=True)
class RequestRecord:
    """How one request went (built once per request and read at once: not ``frozen``, whose
    ``__init__`` costs ~2 µs more)."""

    outcome: str
    seconds: float
    similarity: float | None
    entry: str | None
    usage: dict[str, Any] | None
    replica: str | None
    status: int
    verifier_score: float | None = None
    #: The error code of a failed request ("" when it succeeded).
    reason: str = ""


Usage = dict[str, Any]
"""An OpenAI ``usage`` object."""


def usage_of_json(body: bytes) -> Usage | None:
    """``usage`` of a JSON answer (or of one SSE event's JSON), None when it has none."""
    if b'"usage"' not in body:
        return None
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    usage = answer.get("usage") if isinstance(answer, dict) else None
    return usage if isinstance(usage, dict) else None


def usage_of_sse(tail: bytes) -> Usage | None:
    """``usage`` of a stream from its last bytes (the usage event precedes ``[DONE]``)."""
    at = tail.rfind(b'"usage"')
    if at < 0:
        return None
    start = tail.rfind(b"data: ", 0, at)
    end = tail.find(b"\n", at)
    return usage_of_json(tail[start + 6 if start >= 0 else 0 : end if end >= 0 else None])


def record_request(
    metrics: Metrics,
    span: Span | None,
    req: GatewayRequest,
    rec: RequestRecord,
    *,
    access_log: AccessLog | None,
) -> None:
    metrics.request(req.endpoint, rec.outcome, req.tenant, rec.seconds, str(rec.status), rec.reason)
    if rec.replica is not None and rec.usage and rec.outcome != "coalesced":
        metrics.tokens(req.model, rec.usage)
    if span is not None:
        set_attributes(
            span,
            request_attributes(
                req,
                outcome=rec.outcome,
                status=rec.status,
                similarity=rec.similarity,
                verifier_score=rec.verifier_score,
                entry=rec.entry,
                replica=rec.replica,
                usage=rec.usage,
            ),
        )
    if access_log is not None:
        line = {
            "ts": round(time.time(), 3),
            "request_id": req.request_id,
            "tenant": req.tenant,
            "route": req.endpoint,
            "model": req.model,
            "outcome": rec.outcome,
            "similarity": rec.similarity,
            "entry": rec.entry,
            "replica": rec.replica,
            "status": rec.status,
            "latency_ms": round(rec.seconds * 1000, 3),
        }
        if rec.reason:
            line["reason"] = rec.reason
        access_log.write(line)


def record_rejection(
    metrics: Metrics,
    access_log: AccessLog | None,
    *,
    route: str,
    status: int,
    reason: str,
    tenant: str,
    request_id: str,
    seconds: float,
) -> None:
    """A request refused before the pipeline (400, 401, 404, 408, 413, 429): counted as
    ``cache="rejected"`` with its status and reason, and logged like any other."""
    metrics.request(route, "rejected", tenant, seconds, str(status), reason)
    if access_log is not None:
        access_log.write(
            {
                "ts": round(time.time(), 3),
                "request_id": request_id,
                "tenant": tenant,
                "route": route,
                "outcome": "rejected",
                "status": status,
                "reason": reason,
                "latency_ms": round(seconds * 1000, 3),
            }
        )


def span_attributes(
    req: GatewayRequest, lookup: Lookup, replica: str | None, status: int
) -> dict[str, Any]:
    """The request span's attributes (Langfuse's trace) from what is known when a stream's
    response starts."""
    return request_attributes(
        req,
        outcome=lookup.outcome.value,
        status=status,
        similarity=lookup.similarity,
        verifier_score=lookup.verifier_score,
        entry=lookup.entry_id,
        replica=replica,
    )
