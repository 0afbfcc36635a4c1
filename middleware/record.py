"""What is recorded once per request: metrics, the request span's attributes, the access log.

:meth:`RecordStep.observe` is the one record of a request that reached the pipeline, called
once by ``Pipeline.handle`` (for a stream: when it ends), fed by the :class:`Lookup` and, on a
miss, by what the reply says (the replica, the call's :class:`Produced` record, the error):
never by reading response headers back. A request refused before the pipeline (400, 401, 404,
408, 413, 429) is recorded by :meth:`RecordStep.rejected`. The replica's tokens are counted
where the call completes (``middleware.produce``), once per call, not here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import Span

from deja.errors import DejaError
from deja.observability.accesslog import AccessLog
from deja.observability.langfuse import request_attributes
from deja.observability.metrics import Metrics
from deja.observability.stats import Stats
from deja.observability.tracing import Tracing, set_attributes
from deja.request import GatewayRequest
from middleware.errors import http_error
from middleware.lookup import Lookup
from middleware.produce import Produced


@dataclass
class Observability:
    """Where a request leaves its traces: metrics, spans, the access log, per-tenant counts."""

    metrics: Metrics = field(default_factory=Metrics)
    tracing: Tracing = field(default_factory=Tracing)
    access_log: AccessLog | None = None
    stats: Stats = field(default_factory=Stats)


def failure_of(error: BaseException) -> tuple[int, str]:
    """The status and the error code a failed request is recorded with (500
    ``internal_error`` for anything that is not a deja error)."""
    if isinstance(error, DejaError):
        shape = http_error(error)
        return shape.status, shape.code or shape.type
    return 500, "internal_error"


def attributes(
    req: GatewayRequest,
    lookup: Lookup,
    status: int,
    replica: str | None,
    entry: str | None,
    usage: dict[str, Any] | None,
) -> dict[str, Any]:
    """The request span's attributes (Langfuse's trace)."""
    return request_attributes(
        req,
        outcome=lookup.outcome.value,
        status=status,
        similarity=lookup.similarity,
        verifier_score=lookup.verifier_score,
        entry=entry,
        replica=replica,
        usage=usage,
    )


class RecordStep:
    """The once-per-request record."""

    def __init__(self, obs: Observability) -> None:
        self.obs = obs
        self.metrics = obs.metrics

    def observe(
        self,
        req: GatewayRequest,
        lookup: Lookup,
        started: float,
        *,
        replica: str | None = None,
        produced: Produced | None = None,
        error: BaseException | None = None,
        span: Span | None = None,
    ) -> None:
        """Record one request: how it was answered (``lookup``), where (``replica``), what
        the replica's answer used (``produced``; a hit's usage comes from the stored answer),
        and how it failed (``error``)."""
        seconds = time.perf_counter() - started
        status, reason = failure_of(error) if error is not None else (200, "")
        outcome = lookup.outcome.value
        entry = lookup.answer.entry_id if lookup.answer is not None else lookup.entry_id
        if lookup.answer is not None:
            usage = lookup.answer.usage
        else:
            usage = produced.usage if produced is not None else None
        self.metrics.request(req.endpoint, outcome, req.tenant, seconds, str(status), reason)
        if span is not None:
            set_attributes(span, attributes(req, lookup, status, replica, entry, usage))
        access_log = self.obs.access_log
        if access_log is not None:
            access_log.request(
                request_id=req.request_id,
                tenant=req.tenant,
                route=req.endpoint,
                outcome=outcome,
                status=status,
                seconds=seconds,
                reason=reason,
                model=req.model,
                similarity=lookup.similarity,
                entry=entry,
                replica=replica,
            )

    def stream_started(
        self, span: Span | None, req: GatewayRequest, lookup: Lookup, replica: str | None
    ) -> None:
        """A stream's request span ends when its response starts (the record follows when the
        stream ends): its attributes, from what is known now."""
        if span is not None:
            set_attributes(span, attributes(req, lookup, 200, replica, lookup.entry_id, None))

    def rejected(
        self,
        error: DejaError,
        *,
        route: str,
        tenant: str,
        request_id: str,
        seconds: float,
    ) -> None:
        """A request refused before the pipeline (400, 401, 404, 408, 413, 429): counted as
        ``cache="rejected"`` with its status and reason, and logged like any other."""
        status, reason = failure_of(error)
        self.metrics.request(route, "rejected", tenant, seconds, str(status), reason)
        if self.obs.access_log is not None:
            self.obs.access_log.request(
                request_id=request_id,
                tenant=tenant,
                route=route,
                outcome="rejected",
                status=status,
                seconds=seconds,
                reason=reason,
            )
