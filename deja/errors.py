"""The one exception tree of deja. It knows nothing of HTTP: ``middleware.errors`` is the single
module that maps each class to a status code and OpenAI's error shape.

Lower-layer exceptions (aiohttp, redis, orjson, onnxruntime, qdrant) are re-raised as one of these
``from exc`` at the boundary that catches them::

    DejaError                        message, param
    ├── InvalidRequestError          the request is malformed (a field, a header)
    │   ├── BodyTooLargeError        the body is over ``max_body_bytes``
    │   └── BodyReadTimeoutError     the body did not arrive within ``body_read_timeout_seconds``
    ├── ModelNotFoundError           no replica serves the requested model
    ├── NotFoundError                an admin resource (entry) does not exist
    │   └── CorpusNotFoundError      this tenant has no such corpus (nor sees another's)
    ├── AuthenticationError          no client key, or an unknown one
    ├── PermissionDeniedError        a valid key that may not do this (a client key on /admin)
    ├── RateLimitError               the key is over its budget; ``retry_after`` seconds
    ├── OverloadedError              every replica is at its in-flight limit; ``retry_after``
    │   └── QueueFullError           ... and the wait queue is full too: refused at once
    ├── ClientGoneError              the client disconnected; nothing is sent
    ├── CacheUnavailableError        the exact store failed: served with ``X-Deja-Cache: off``
    ├── ThresholdStoreError          the shared θ store (Redis or the data dir) failed
    ├── VectorStoreError             the vector store failed: the semantic layer is skipped
    │   └── DiskFullError            the data disk is below its reserve: nothing is written
    ├── EmbedderError                the embedder failed: the semantic layer is skipped
    ├── VerifierError                the verifier failed: the candidate is not served
    ├── RetrievalError               the corpus store failed or timed out (RAG step)
    ├── NoRelevantContextError       no chunk passed the relevance floor and the tenant refuses
    ├── DocumentError                a file could not be ingested (unreadable, empty, too big)
    ├── DataDirInUseError            another process holds the data directory
    ├── TuningError                  a tuning input cannot be used (CLI only, never a request)
    │   ├── ModelConfigError         a model's config.json is unreadable or lacks a field
    │   └── ReplicaError             a replica under test did not start, answer or report
    └── UpstreamError                talking to a replica failed
        ├── NoHealthyReplicaError    no usable replica
        ├── UpstreamUnreachableError the transport broke
        │   └── ReplicaConnectError  no response arrived: safe to fail over to another replica
        ├── UpstreamTimeoutError     the replica stalled
        │   └── DeadlineExceededError the request's overall deadline passed while it was served
        ├── UpstreamServerError      the replica answered 5xx (``replica_status``)
        └── UpstreamClientError      the replica answered 4xx: passed through as it came

    ConfigError (config.settings)    the configuration cannot be used; raised at start-up and by
                                     the CLI, never on a request, so it sits outside the tree
                                     (``config`` imports nothing from the project).
"""

from __future__ import annotations

from typing import Any

from config.settings import ConfigError

__all__ = [
    "AuthenticationError",
    "BodyReadTimeoutError",
    "BodyTooLargeError",
    "CacheUnavailableError",
    "ClientGoneError",
    "ConfigError",
    "CorpusNotFoundError",
    "DataDirInUseError",
    "DeadlineExceededError",
    "DejaError",
    "DiskFullError",
    "DocumentError",
    "EmbedderError",
    "InvalidRequestError",
    "ModelConfigError",
    "ModelNotFoundError",
    "NoHealthyReplicaError",
    "NoRelevantContextError",
    "NotFoundError",
    "OverloadedError",
    "PermissionDeniedError",
    "QueueFullError",
    "RateLimitError",
    "ReplicaConnectError",
    "ReplicaError",
    "RetrievalError",
    "ThresholdStoreError",
    "TuningError",
    "UpstreamClientError",
    "UpstreamError",
    "UpstreamServerError",
    "UpstreamTimeoutError",
    "UpstreamUnreachableError",
    "VectorStoreError",
    "VerifierError",
    "describe",
]


class DejaError(Exception):
    """Base of every error deja raises on purpose. ``param`` names the offending input."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


def describe(exc: BaseException) -> str:
    """A non-empty reason for a log line: ``str(TimeoutError())`` is empty."""
    return str(exc) or type(exc).__name__


# --- the client's fault -------------------------------------------------------------------------
class InvalidRequestError(DejaError):
    """Malformed JSON, a missing field, a field or header of the wrong type."""


class BodyTooLargeError(InvalidRequestError):
    """The request body is over the configured limit."""


class BodyReadTimeoutError(InvalidRequestError):
    """The client did not send its whole body in time (a body shorter than its Content-Length
    would otherwise hold the connection open for good)."""


class ModelNotFoundError(DejaError):
    """No replica serves the requested model."""


class NotFoundError(DejaError):
    """An admin resource (a cache entry, a path) does not exist."""


class CorpusNotFoundError(NotFoundError):
    """The tenant has no corpus of that name. Another tenant's corpus is reported the same way,
    so its existence does not leak."""


class AuthenticationError(DejaError):
    """No key, or a key that maps to no tenant."""


class PermissionDeniedError(DejaError):
    """A valid key that may not do this (a client key on /admin, the admin API disabled)."""


class RateLimitError(DejaError):
    """The key is over its requests-per-minute budget."""

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class OverloadedError(DejaError):
    """Every replica that serves the model is at its in-flight limit and the request's wait
    ran out; ``retry_after`` seconds is a hint for the client."""

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class QueueFullError(OverloadedError):
    """Every replica is saturated and the wait queue is full: refused without waiting."""


class ClientGoneError(DejaError):
    """The client disconnected; the upstream work was cancelled and nothing is sent."""


# --- a dependency's fault -----------------------------------------------------------------------
class CacheUnavailableError(DejaError):
    """A cache backend failed; the pipeline degrades to ``X-Deja-Cache: off``, never to a 5xx."""


class ThresholdStoreError(DejaError):
    """The shared θ store could not be read or written."""


class VectorStoreError(DejaError):
    """The vector store failed; the semantic layer is skipped for this request."""


class DiskFullError(VectorStoreError):
    """The data directory's disk is below its reserve (``disk_reserve_mb``): the write was
    refused before it reached Qdrant Edge's memory maps, where a full disk is a SIGBUS."""


class EmbedderError(DejaError):
    """The embedder failed; the semantic layer is skipped for this request."""


class VerifierError(DejaError):
    """The verifier failed or its model is unusable; no unverified candidate is served."""


class RetrievalError(DejaError):
    """The corpus store failed or timed out; the tenant's ``rag_on_failure`` decides whether
    the question is answered without context or refused."""


class NoRelevantContextError(DejaError):
    """No chunk of the corpus passed the relevance floor for the question, and
    ``rag_on_empty`` is ``error``: refused rather than answered without context."""


class DocumentError(DejaError):
    """A file could not be ingested: unreadable, empty, encrypted, over the size limit, or of
    a type deja cannot parse. Reported per file; the other files are ingested."""


class DataDirInUseError(DejaError):
    """Another gateway process holds the data directory (its on-disk stores are single-writer)."""


class UpstreamError(DejaError):
    """Base for failures talking to a replica."""


class NoHealthyReplicaError(UpstreamError):
    """No replica is usable for this request."""


class UpstreamUnreachableError(UpstreamError):
    """The replica refused or dropped the connection."""


class ReplicaConnectError(UpstreamUnreachableError):
    """The connection was refused or dropped before any response: another replica may answer."""


class UpstreamTimeoutError(UpstreamError):
    """The replica did not answer (or stalled mid-stream) within the read timeout."""


class DeadlineExceededError(UpstreamTimeoutError):
    """The request's overall deadline (``request_timeout_seconds``) passed while a replica was
    answering it; a stream ends with an error event."""


class UpstreamServerError(UpstreamError):
    """The replica answered with a 5xx; the client gets a 502 carrying the replica's message."""

    def __init__(self, message: str, *, replica_status: int) -> None:
        super().__init__(message)
        self.replica_status = replica_status


class UpstreamClientError(UpstreamError):
    """The replica rejected the request (4xx): passed through with its own status and body."""

    def __init__(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
        error = body.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        super().__init__(str(message or f"replica answered {status}"))
        self.status = status
        self.body = body
        self.headers = headers


# --- tuning (deja tune, kv-budget, vllm-args, doctor: the CLI, never a request) ----------------
class TuningError(DejaError):
    """A tuning input cannot be used; the CLI prints the message as one line and exits non-zero."""


class ModelConfigError(TuningError):
    """A model's ``config.json`` is unreadable, not JSON, or lacks a field the arithmetic needs."""


class ReplicaError(TuningError):
    """A replica under test did not start, did not answer, or did not report its metrics."""
