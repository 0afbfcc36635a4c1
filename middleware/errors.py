"""The one place that maps a domain error to HTTP: a status code and OpenAI's error shape
``{"error": {"message", "type", "param", "code"}}``, so the ``openai`` SDK raises its matching
exception class. Used by the fast path, the pipeline (status for metrics, stream error events)
and the FastAPI handlers in ``app.api.errors``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.responses import Response

from deja.errors import (
    AuthenticationError,
    BodyReadTimeoutError,
    BodyTooLargeError,
    ClientGoneError,
    CorpusNotFoundError,
    DeadlineExceededError,
    DejaError,
    DiskFullError,
    DocumentError,
    InvalidRequestError,
    ModelNotFoundError,
    NoHealthyReplicaError,
    NoRelevantContextError,
    NotFoundError,
    OverloadedError,
    PermissionDeniedError,
    QueueFullError,
    RateLimitError,
    ReplicaConnectError,
    RetrievalError,
    UpstreamClientError,
    UpstreamError,
    UpstreamServerError,
    UpstreamTimeoutError,
    UpstreamUnreachableError,
)
from deja.observability.throttle import Throttle
from middleware.responses import JSON, prebuilt
from middleware.sse import DONE, encode

log = logging.getLogger("deja.api")
#: An error line per failing request, bounded: a flood of them writes ten lines per 10 s.
log.addFilter(Throttle())


@dataclass(frozen=True, slots=True)
class HttpError:
    """How one error class looks on the wire."""

    status: int
    type: str
    code: str | None = None


_INVALID = "invalid_request_error"
#: Most specific class first: the first ``isinstance`` match wins.
_TABLE: tuple[tuple[type[DejaError], HttpError], ...] = (
    (BodyTooLargeError, HttpError(413, _INVALID, "request_too_large")),
    (BodyReadTimeoutError, HttpError(408, _INVALID, "request_timeout")),
    (InvalidRequestError, HttpError(400, _INVALID)),
    (DocumentError, HttpError(400, _INVALID, "unusable_document")),
    (ModelNotFoundError, HttpError(404, _INVALID, "model_not_found")),
    (CorpusNotFoundError, HttpError(404, _INVALID, "corpus_not_found")),
    (NotFoundError, HttpError(404, _INVALID, "not_found")),
    (AuthenticationError, HttpError(401, _INVALID, "invalid_api_key")),
    (PermissionDeniedError, HttpError(403, _INVALID, "permission_denied")),
    (RateLimitError, HttpError(429, "requests", "rate_limit_exceeded")),
    (QueueFullError, HttpError(503, "service_unavailable", "queue_full")),
    (OverloadedError, HttpError(429, "requests", "overloaded")),
    (RetrievalError, HttpError(503, "service_unavailable", "retrieval_unavailable")),
    (DiskFullError, HttpError(507, "service_unavailable", "insufficient_storage")),
    (NoRelevantContextError, HttpError(422, _INVALID, "no_relevant_context")),
    (ClientGoneError, HttpError(499, "client_closed_request")),
    (NoHealthyReplicaError, HttpError(503, "service_unavailable", "no_healthy_replica")),
    (DeadlineExceededError, HttpError(504, "timeout", "deadline_exceeded")),
    (UpstreamTimeoutError, HttpError(504, "timeout", "upstream_timeout")),
    (UpstreamUnreachableError, HttpError(502, "upstream_error", "upstream_unreachable")),
    (UpstreamServerError, HttpError(502, "upstream_error", "upstream_server_error")),
    (UpstreamError, HttpError(502, "upstream_error")),
)
#: Anything else deja raises on purpose (a store that failed where it could not degrade).
_SERVER = HttpError(503, "service_unavailable", "dependency_unavailable")
_INTERNAL = orjson.dumps(
    {
        "error": {
            "message": "internal error in the deja gateway; see its log",
            "type": "server_error",
            "param": None,
            "code": "internal_error",
        }
    }
)


def http_error(exc: DejaError) -> HttpError:
    """Status, type and code of ``exc``."""
    if isinstance(exc, UpstreamClientError):
        return HttpError(exc.status, _INVALID)
    for cls, shape in _TABLE:
        if isinstance(exc, cls):
            return shape
    return _SERVER


#: What a client reads when talking to a replica failed: never the replica's address or the
#: transport's words (they are logged), and for an answer cut after it began, not "connecting".
#: ``NoHealthyReplicaError`` keeps its own words: deja writes them (no address), and they say
#: what to do (e.g. that no replica is configured at all, and which setting names them).
_UPSTREAM_MESSAGES: tuple[tuple[type[DejaError], str], ...] = (
    (DeadlineExceededError, "The request's deadline passed while the model was answering."),
    (UpstreamTimeoutError, "The model replica stopped sending the answer in time."),
    (ReplicaConnectError, "No model replica could be reached."),
    (UpstreamUnreachableError, "The connection to the model replica was lost mid-answer."),
    (UpstreamServerError, "The model replica failed to answer."),
)


def public_message(exc: DejaError) -> str:
    """``exc``'s message as a client may read it: a replica's 5xx keeps the replica's own
    words (``replica HOST:PORT failed with 500: …`` → ``The model replica failed with 500:
    …``); other upstream failures get a fixed sentence (the transport's words name hosts);
    ``NoHealthyReplicaError`` keeps deja's own words (no address; they say what to do)."""
    if isinstance(exc, UpstreamServerError):
        _, sep, rest = exc.message.partition(" failed with ")
        return f"The model replica failed with {rest}" if sep else _UPSTREAM_MESSAGES[-1][1]
    if isinstance(exc, UpstreamError) and not isinstance(
        exc, UpstreamClientError | NoHealthyReplicaError
    ):
        for cls, message in _UPSTREAM_MESSAGES:
            if isinstance(exc, cls):
                return message
        return "Talking to the model replica failed."
    return exc.message


def error_body(exc: DejaError) -> dict[str, Any]:
    """OpenAI's error shape for ``exc`` (a replica's own 4xx body passes through)."""
    if isinstance(exc, UpstreamClientError):
        return exc.body
    shape = http_error(exc)
    return {
        "error": {
            "message": public_message(exc),
            "type": shape.type,
            "param": exc.param,
            "code": shape.code,
        }
    }


def error_headers(exc: DejaError) -> dict[str, str]:
    if isinstance(exc, RateLimitError | OverloadedError):
        return {"retry-after": str(exc.retry_after)}
    if isinstance(exc, BodyReadTimeoutError):  # the rest of the body may never come
        return {"connection": "close"}
    if isinstance(exc, AuthenticationError):
        return {"www-authenticate": "Bearer"}
    if isinstance(exc, UpstreamClientError):
        return exc.headers
    return {}


def error_response(exc: BaseException, where: str = "") -> Response:
    """The response for any exception: a deja error in OpenAI's shape, a bug as a logged,
    opaque 500 (never a traceback on the wire)."""
    if isinstance(exc, DejaError):
        status = http_error(exc).status
        if status >= 500:
            log.warning("%s -> %d: %s", where, status, exc)
        return prebuilt(orjson.dumps(error_body(exc)), JSON, error_headers(exc), status)
    log.error("unhandled error on %s", where, exc_info=exc)
    return prebuilt(_INTERNAL, JSON, {}, 500)


def plain_error(
    status: int, message: str, code: str | None = None, param: str | None = None
) -> Response:
    """An OpenAI-shaped error for a status the framework decided (404/405 on unknown routes,
    422 on a parameter of the wrong type)."""
    body = {"error": {"message": message, "type": _INVALID, "param": param, "code": code}}
    return prebuilt(orjson.dumps(body), JSON, {}, status)


#: What a client reads when a stream fails after it began: no exception text, no replica
#: address (those go to the log, with the request id).
_STREAM_MESSAGES: tuple[tuple[type[DejaError], str], ...] = (
    (UpstreamTimeoutError, "The model replica stopped sending the answer in time."),
    (UpstreamUnreachableError, "The connection to the model replica was lost mid-answer."),
)
_STREAM_DEFAULT = "The model replica failed while streaming the answer."


def stream_error_event(exc: DejaError, request_id: str) -> bytes:
    """The clean end of a stream that failed midway, in OpenAI's error shape with a public
    message; the details are logged against ``request_id``."""
    log.warning("stream %s ended early: %s", request_id, exc)
    message = next((m for cls, m in _STREAM_MESSAGES if isinstance(exc, cls)), _STREAM_DEFAULT)
    error = {
        "error": {
            "message": f"{message} (request {request_id})",
            "type": http_error(exc).type,
            "param": None,
            "code": http_error(exc).code or "upstream_error",
        }
    }
    return encode(error) + DONE
