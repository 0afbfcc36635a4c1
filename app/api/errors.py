"""Install the error handlers: every failure leaves as an OpenAI-shaped JSON error."""

from __future__ import annotations

import logging

from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from app.errors import (
    DejaError,
    MethodNotAllowedError,
    NotFoundError,
    error_payload,
    internal_error_payload,
)

log = logging.getLogger("deja.api")


def _respond(status: int, body: bytes, headers: dict[str, str]) -> Response:
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def error_response(request: Request, exc: Exception) -> Response:
    """The OpenAI-shaped response for any exception (a bug becomes a logged, opaque 500)."""
    if isinstance(exc, DejaError):
        if exc.status_code >= 500:
            log.warning("%s %s -> %d: %s", request.method, request.url.path, exc.status_code, exc)
        return _respond(*error_payload(exc))
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return _respond(*internal_error_payload())


async def _deja_error(request: Request, exc: Exception) -> Response:
    return error_response(request, exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error: DejaError
    if exc.status_code == 404:
        error = NotFoundError(f"Unknown path {request.url.path}")
    elif exc.status_code == 405:
        error = MethodNotAllowedError(f"{request.method} is not allowed on {request.url.path}")
    else:
        _, body, headers = error_payload(DejaError(str(exc.detail)))
        return _respond(exc.status_code, body, headers)
    return _respond(*error_payload(error))


async def _unexpected(request: Request, exc: Exception) -> Response:
    return error_response(request, exc)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(DejaError, _deja_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
