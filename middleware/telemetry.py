"""What is recorded once per request: metrics, the request span's attributes, the access log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import Span

from deja.observability.accesslog import AccessLog
from deja.observability.langfuse import request_attributes
from deja.observability.metrics import Metrics
from deja.observability.tracing import set_attributes
from deja.request import GatewayRequest


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """How one request went."""

    outcome: str
    seconds: float
    similarity: float | None
    entry: str | None
    usage: dict[str, Any] | None
    replica: str | None
    status: int
    verifier_score: float | None = None


def record_request(
    metrics: Metrics,
    span: Span | None,
    req: GatewayRequest,
    rec: RequestRecord,
    *,
    access_log: AccessLog | None,
) -> None:
    metrics.request(req.endpoint, rec.outcome, req.tenant, rec.seconds)
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
        access_log.write(line)
