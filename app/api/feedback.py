"""Feedback on a served cache entry: ``POST /v1/feedback`` for applications, and
``POST /admin/cache/entries/{id}/feedback`` (in :mod:`app.api.admin_cache`) for admins.

An application that was served a cached answer knows its entry from the ``X-Deja-Entry``
header. It reports ``{"entry_id": ..., "verdict": "wrong" | "right"}`` with its own client key:
the key's tenant must own the entry, and another tenant's entry is a 404 exactly like an unknown
one, so an entry's existence does not leak. The call takes the tenant's rate limit like any
request. ``wrong`` removes the entry from both layers at once
(:func:`app.api.entries.remove_entries`: no process serves it once the call returns), also when
the answer was served as a semantic hit for another question (issue 24 asks for that; the
answer is not trusted for its own question any more either). An alias (``X-Deja-Entry`` of an
answer served through a promoted paraphrase) is removed alone: the answer was wrong for that
question, not for the entry's own. ``right`` changes nothing. Both
are counted (``deja_feedback_total{verdict,source}``) and written to the audit trail, naming
the key.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.api.admin import audit
from app.api.entries import exact_store, remove_entries
from app.api.errors import first_problem
from app.api.json import json_response
from app.gateway import Gateway, gateway_of
from deja.cache.keys import ENTRY_ID
from deja.errors import DejaError, InvalidRequestError, NotFoundError
from middleware.admit import header_map, read_body, request_id
from middleware.validate import parse_json

__all__ = ["FEEDBACK_PATH", "Feedback", "Verdict", "apply_feedback", "feedback", "routes"]

FEEDBACK_PATH = "/v1/feedback"
#: The most bytes a feedback body may have (an id, a verdict and a short note).
MAX_FEEDBACK_BYTES = 4096

Verdict = Literal["right", "wrong"]


class Feedback(BaseModel):
    """An application's verdict on the cached answer it was served."""

    model_config = ConfigDict(extra="forbid")

    entry_id: str = Field(description="The X-Deja-Entry header of the cached answer.")
    verdict: Verdict
    note: str | None = Field(None, max_length=500, description="Kept in the audit trail.")


async def apply_feedback(
    gateway: Gateway,
    entry_id: str,
    verdict: Verdict,
    *,
    tenant: str | None,
    source: str,
    who: str | None,
    note: str | None = None,
) -> dict[str, Any]:
    """Record ``verdict`` on ``entry_id`` (owned by ``tenant``, or any tenant when None) and,
    for ``wrong``, remove it; a 404 when there is no such entry for that tenant."""
    exact = exact_store(gateway)
    answer = await exact.get(entry_id) if ENTRY_ID.fullmatch(entry_id) else None
    if answer is None or (tenant is not None and answer.tenant != tenant):
        raise NotFoundError(f"no cache entry {entry_id}", param="entry_id")
    if gateway.learning is not None:  # a verdict on a served answer
        gateway.learning.served(
            answer.tenant,
            answer.model,
            answer.alias_of or answer.entry_id,
            score=None,
            correct=verdict == "right",
            source="feedback",
        )
    removed = verdict == "wrong" and await remove_entries(gateway, [entry_id]) > 0
    gateway.metrics.count(gateway.metrics.feedback, verdict, source)
    details = {"id": entry_id, "verdict": verdict, "removed": removed}
    audit(gateway, "cache.feedback", who=who, **details, **({"note": note} if note else {}))
    return {"entry_id": entry_id, "verdict": verdict, "removed": removed}


def parse_feedback(raw: bytes) -> Feedback:
    """The body as a :class:`Feedback`; a 400 naming the first offending field."""
    try:
        return Feedback.model_validate(parse_json(raw))
    except ValidationError as exc:
        field, problem = first_problem(exc.errors())
        raise InvalidRequestError(f"Invalid '{field}': {problem}.", param=field) from exc


async def feedback(request: Request) -> Response:
    gateway = gateway_of(request)
    arrived = time.monotonic()
    headers = header_map(request)
    tenant = "-"
    try:
        caller = gateway.keys.authenticate(headers.get("authorization"))
        tenant = caller.tenant.name
        await gateway.admit_step.take_rate_limit(caller)
        body = parse_feedback(await read_body(request, headers, MAX_FEEDBACK_BYTES))
        result = await apply_feedback(
            gateway,
            body.entry_id,
            body.verdict,
            tenant=tenant,
            source="app",
            who=f"key:{caller.key_id[:8]}",
            note=body.note,
        )
    except DejaError as exc:
        gateway.pipeline.record_step.rejected(
            exc,
            route="feedback",
            tenant=tenant,
            request_id=request_id(headers.get("x-request-id")),
            seconds=time.monotonic() - arrived,
        )
        raise
    return json_response({"object": "deja.feedback", **result})


routes = [Route(FEEDBACK_PATH, feedback, methods=["POST"])]
