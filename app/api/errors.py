"""Install the error handlers: every failure leaves as an OpenAI-shaped JSON error, through the
one mapping in ``middleware.errors``."""

from __future__ import annotations

from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from deja.errors import DejaError
from middleware.errors import error_response, plain_error


async def _any_error(request: Request, exc: Exception) -> Response:
    return error_response(exc, f"{request.method} {request.url.path}")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if isinstance(exc.__cause__, DejaError):  # FastAPI's 400 around a failed body read (408)
        return error_response(exc.__cause__, f"{request.method} {request.url.path}")
    if exc.status_code == 404:
        return plain_error(404, f"Unknown path {request.url.path}", "not_found")
    if exc.status_code == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
        return plain_error(405, message, "method_not_allowed")
    return plain_error(exc.status_code, str(exc.detail))


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _any_error)
