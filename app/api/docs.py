"""``/openapi.json`` and ``/docs``: both on or both off, by one setting (``DEJA_API_DOCS``).

Off (the default) they answer an OpenAI-shaped 404 that names the setting, so a user who tries
``/docs`` learns why instead of guessing; on, FastAPI serves the schema and its Swagger page.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from deja.errors import NotFoundError

__all__ = ["OPENAPI_PATH", "SWAGGER_PATH", "install_docs_off"]

OPENAPI_PATH = "/openapi.json"
SWAGGER_PATH = "/docs"
DOCS_OFF = (
    "the API docs are off: start the gateway with DEJA_API_DOCS=true to serve /docs and "
    "/openapi.json"
)


async def _docs_off(request: Request) -> Response:
    raise NotFoundError(DOCS_OFF)


def install_docs_off(app: FastAPI) -> None:
    """The two paths as 404s naming the setting (when the docs are off)."""
    for path in (OPENAPI_PATH, SWAGGER_PATH):
        app.add_route(path, _docs_off, methods=["GET"], include_in_schema=False)
