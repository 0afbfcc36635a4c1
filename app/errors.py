"""The one exception tree of deja, and its single mapping to OpenAI-shaped HTTP errors.

Lower-layer exceptions (httpx, redis, orjson) are re-raised as one of these ``from exc`` at the
boundary that catches them; nothing else builds error JSON.
"""

from __future__ import annotations

from typing import Any, ClassVar

import orjson


class DejaError(Exception):
    """Base of every error deja raises on purpose."""

    status_code: ClassVar[int] = 500
    error_type: ClassVar[str] = "server_error"
    code: ClassVar[str | None] = None

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def headers(self) -> dict[str, str]:
        """Extra response headers (``Retry-After``, ``WWW-Authenticate``)."""
        return {}

    def body(self) -> dict[str, Any]:
        """OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }


class ConfigError(DejaError):
    """The configuration cannot be used (bad YAML, unknown key, invalid value)."""


# --- the client's fault ---------------------------------------------------------------------
class InvalidRequestError(DejaError):
    """Malformed JSON, a missing field or a field of the wrong type."""

    status_code = 400
    error_type = "invalid_request_error"


class BodyTooLargeError(DejaError):
    status_code = 413
    error_type = "invalid_request_error"
    code = "request_too_large"


class ModelNotFoundError(DejaError):
    status_code = 404
    error_type = "invalid_request_error"
    code = "model_not_found"


class AuthenticationError(DejaError):
    """No key, or a key that maps to no tenant (the SDK raises AuthenticationError)."""

    status_code = 401
    error_type = "invalid_request_error"
    code = "invalid_api_key"

    def headers(self) -> dict[str, str]:
        return {"www-authenticate": "Bearer"}


class PermissionDeniedError(DejaError):
    """A valid key that may not do this (a client key on /admin)."""

    status_code = 403
    error_type = "invalid_request_error"
    code = "permission_denied"


class RateLimitError(DejaError):
    """The key is over its requests-per-minute budget."""

    status_code = 429
    error_type = "requests"
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {"retry-after": str(self.retry_after)}


class NotFoundError(DejaError):
    status_code = 404
    error_type = "invalid_request_error"
    code = "not_found"


class MethodNotAllowedError(DejaError):
    status_code = 405
    error_type = "invalid_request_error"
    code = "method_not_allowed"


# --- a dependency's fault ---------------------------------------------------------------------
class CacheUnavailableError(DejaError):
    """A cache backend failed; the pipeline degrades to ``X-Deja-Cache: off``, never to a 5xx."""


class UpstreamError(DejaError):
    """Base for failures talking to a replica."""

    status_code = 502
    error_type = "upstream_error"


class NoHealthyReplicaError(UpstreamError):
    status_code = 503
    error_type = "service_unavailable"
    code = "no_healthy_replica"


class UpstreamUnreachableError(UpstreamError):
    """The replica refused or dropped the connection."""

    code = "upstream_unreachable"


class UpstreamTimeoutError(UpstreamError):
    status_code = 504
    error_type = "timeout"
    code = "upstream_timeout"


class UpstreamServerError(UpstreamError):
    """The replica answered with a 5xx; the client gets a 502 carrying the replica's message."""

    code = "upstream_server_error"

    def __init__(self, message: str, *, replica_status: int) -> None:
        super().__init__(message)
        self.replica_status = replica_status


class UpstreamClientError(UpstreamError):
    """The replica rejected the request (4xx): passed through with its own status and body."""

    def __init__(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
        error = body.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        super().__init__(str(message or f"replica answered {status}"))
        self.passthrough_status = status
        self.passthrough_body = body
        self.passthrough_headers = headers

    def body(self) -> dict[str, Any]:
        return self.passthrough_body


def error_payload(exc: DejaError) -> tuple[int, bytes, dict[str, str]]:
    """Map any deja error to (status, JSON body, extra headers): the one place that does it."""
    if isinstance(exc, UpstreamClientError):
        return exc.passthrough_status, orjson.dumps(exc.body()), exc.passthrough_headers
    return exc.status_code, orjson.dumps(exc.body()), exc.headers()


def internal_error_payload() -> tuple[int, bytes, dict[str, str]]:
    """What a client sees for a bug: an OpenAI-shaped 500, never a traceback."""
    body = {
        "error": {
            "message": "internal error in the deja gateway; see its log",
            "type": "server_error",
            "param": None,
            "code": "internal_error",
        }
    }
    return 500, orjson.dumps(body), {}


class ClientGoneError(DejaError):
    """The client disconnected; the upstream work was cancelled and nothing is sent."""

    status_code = 499
    error_type = "client_closed_request"


class VectorStoreError(DejaError):
    """The vector store failed; the semantic layer is skipped for this request."""


class EmbedderError(DejaError):
    """The embedder failed; the semantic layer is skipped for this request."""
