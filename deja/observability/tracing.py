"""OpenTelemetry traces: one span per request, a child span per pipeline step.

Off unless the standard ``OTEL_*`` variables configure an exporter
(``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, and
``OTEL_TRACES_EXPORTER`` not ``none``) or Langfuse is configured (``DEJA_LANGFUSE_*``, see
``deja.observability.langfuse``); then spans go out over OTLP/HTTP in batches, each exporter
through its own batch span processor, and nothing else ever leaves the process. The provider is
the app's own (never the global one). When off, ``span()`` is a shared no-op context manager,
so the hot path pays nothing.

The batch span processor keeps export off the request path: ending a span appends it to a
bounded queue (2,048 spans; when full, spans are dropped, never waited for), and a thread of
its own encodes and posts them every 5 s or 512 spans.

Spans carry GenAI semantic-convention attributes (``gen_ai.*``), ``deja.cache.*``, and the
``langfuse.*`` attributes that Langfuse maps to its traces (``request_attributes``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind, Tracer

_NULL = contextlib.nullcontext(None)


def otel_configured(env: Mapping[str, str] = os.environ) -> bool:
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "otlp").lower() == "none":
        return False
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


class Tracing:
    """The app's tracer, or nothing at all."""

    def __init__(
        self,
        exporter: SpanExporter | None = None,
        *,
        batch: bool = True,
        langfuse: SpanExporter | None = None,
    ) -> None:
        """``exporter``: a test's (``batch=False`` exports each span as it ends), else the
        ``OTEL_*`` one when configured; ``langfuse``: Langfuse's, always batched."""
        self._provider: TracerProvider | None = None
        self._tracer: Tracer | None = None
        if exporter is None and otel_configured():
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()  # endpoint, headers, timeout from OTEL_* variables
        processors: list[SpanProcessor] = []
        if exporter is not None:
            processors.append(
                BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
            )
        if langfuse is not None:
            processors.append(BatchSpanProcessor(langfuse))
        if processors:
            resource = Resource.create(
                {"service.name": os.environ.get("OTEL_SERVICE_NAME", "deja")}
            )
            self._provider = TracerProvider(resource=resource)
            for processor in processors:
                self._provider.add_span_processor(processor)
            self._tracer = self._provider.get_tracer("deja")

    @property
    def enabled(self) -> bool:
        return self._tracer is not None

    def request_span(self, name: str) -> contextlib.AbstractContextManager[Span | None]:
        if self._tracer is None:
            return _NULL
        return self._tracer.start_as_current_span(name, kind=SpanKind.SERVER)

    def span(self, name: str) -> contextlib.AbstractContextManager[Span | None]:
        """A child span of the current one (no-op when tracing is off)."""
        if self._tracer is None:
            return _NULL
        return self._tracer.start_as_current_span(name)

    def flush(self) -> None:
        """Export every span ended so far (benchmarks; shutdown does it too)."""
        if self._provider is not None:
            self._provider.force_flush()

    def shutdown(self) -> None:
        if self._provider is not None:
            self._provider.shutdown()


def set_attributes(span: Span | None, attributes: Mapping[str, Any]) -> None:
    if span is not None:
        span.set_attributes({k: v for k, v in attributes.items() if v is not None})
