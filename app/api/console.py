"""The ops console at ``/admin/ui``: a static page (``app/console/``, shipped as package data)
that signs in with the admin key and draws everything from the admin API.

The page and its assets load without a key: they hold no data. The page sends the key as an
``Authorization`` header on each admin API call (kept in the tab's ``sessionStorage``), never in
a URL. Everything is served from here, so the console works offline (no CDN); the charts are SVG
drawn by the page's own script. A strict Content-Security-Policy allows only this origin's
scripts, styles and API, so text from the cache can never run as script.
"""

from __future__ import annotations

import re
from importlib import resources

from fastapi import APIRouter
from starlette.responses import Response

from middleware.errors import plain_error

router = APIRouter(prefix="/admin/ui")

#: Asset names the console may ask for: one folder level, known kinds, no dots elsewhere.
ASSET = re.compile(r"(?:js/)?[a-z0-9][a-z0-9_-]*\.(?:js|css|svg)")
MEDIA_TYPES = {
    "js": "text/javascript; charset=utf-8",
    "css": "text/css; charset=utf-8",
    "svg": "image/svg+xml",
    "html": "text/html; charset=utf-8",
}
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    # Revalidate every time: a new deja version never runs an old script against a new API.
    "cache-control": "no-cache",
}


def _missing(name: str) -> Response:
    # Answered here rather than raised: a wrong asset name is not an error worth a traceback.
    return plain_error(404, f"no console asset {name}", "not_found")


def _asset(name: str) -> Response:
    path = resources.files("app").joinpath("console", *name.split("/"))
    if not path.is_file():
        return _missing(name)
    kind = name.rsplit(".", 1)[1]
    return Response(path.read_bytes(), media_type=MEDIA_TYPES[kind], headers=SECURITY_HEADERS)


@router.get("", include_in_schema=False)
@router.get("/", include_in_schema=False)
async def console_page() -> Response:
    """The console's single page (no data in it: sign-in happens in the page)."""
    return _asset("index.html")


@router.get("/assets/{name:path}", include_in_schema=False)
async def console_asset(name: str) -> Response:
    """A script, stylesheet or icon of the console; any other name is a 404."""
    if not ASSET.fullmatch(name):
        return _missing(name)
    return _asset(name)
