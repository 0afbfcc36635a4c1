"""Install the error handlers: every failure leaves as an OpenAI-shaped JSON error, through the
one mapping in ``middleware.errors``.

A ``DejaError`` (a 401, 403, 404, 413, 503 … from a FastAPI route) and FastAPI's own 422 are
handled by ordinary exception handlers, which Starlette runs inside the app: the response is
sent and the keep-alive connection stays open. Only a bug reaches the handler for
``Exception``, which Starlette runs in ``ServerErrorMiddleware``; that middleware re-raises
after sending, so uvicorn logs the traceback and closes the connection. Registering *every*
error there (as before issue 19) dropped the connection and logged a traceback for each
client mistake: 195 of 200 follow-up requests failed, and a keyless flood of
``/admin/cache/stats`` wrote 8 MiB of log in 10 s."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match

from deja.errors import DejaError
from middleware.errors import error_response, plain_error


async def _any_error(request: Request, exc: Exception) -> Response:
    return error_response(exc, f"{request.method} {request.url.path}")


def first_problem(errors: Sequence[Mapping[str, Any]]) -> tuple[str | None, str]:
    """The field (dotted, without FastAPI's ``query``/``path``/``body`` prefix) and message of
    a pydantic validation's first error: what an OpenAI-shaped error names."""
    first = errors[0] if errors else {}
    loc = [str(part) for part in first.get("loc", ()) if part not in ("query", "path", "body")]
    return ".".join(loc) or None, str(first.get("msg", "invalid value"))


async def _validation_error(request: Request, exc: Exception) -> Response:
    """FastAPI's 422 (a query or path parameter of the wrong type) in OpenAI's shape."""
    assert isinstance(exc, RequestValidationError)
    param, problem = first_problem(exc.errors())
    message = f"{param or 'the request'}: {problem}"
    return plain_error(422, message, "invalid_value", param=param)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if isinstance(exc.__cause__, DejaError):  # FastAPI's 400 around a failed body read (408)
        return error_response(exc.__cause__, f"{request.method} {request.url.path}")
    if exc.status_code == 404:
        return _without_slash(request) or plain_error(
            404, f"Unknown path {request.url.path}", "not_found"
        )
    if exc.status_code == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
        return plain_error(405, message, "method_not_allowed")
    return plain_error(exc.status_code, str(exc.detail))


def _without_slash(request: Request) -> Response | None:
    """A 307 to the same path without its trailing slash when that path exists. The Location
    is the path alone (and the query): never a host taken from the request's Host header."""
    path = request.url.path
    if len(path) < 2 or not path.endswith("/"):
        return None
    stripped = path.rstrip("/") or "/"
    scope = {**request.scope, "path": stripped}
    if not any(route.matches(scope)[0] != Match.NONE for route in request.app.router.routes):
        return None
    query = request.url.query
    location = quote(stripped) + (f"?{query}" if query else "")
    return Response(status_code=307, headers={"location": location})


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(DejaError, _any_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _any_error)  # bugs only: a logged, opaque 500
