"""orjson-backed JSON responses."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from middleware.responses import JSON, prebuilt


def json_response(data: Any, status_code: int = 200) -> Response:
    return prebuilt(orjson.dumps(data), JSON, {}, status_code)
