"""Labelling what the verifier decided: ops mark a near miss, a recent semantic hit or a pair a
θ preview would start serving as "same" (one answer serves both) or "different".

``/admin/semantic/served`` lists the recent hits with both questions; ``/admin/semantic/labels``
adds (a pair labelled again takes the new label), lists and removes labels;
``/admin/semantic/labels/export`` downloads them as ``deja calibrate --pairs`` reads them. The
labels live in ``deja.semantic.labelled`` (the data dir, shared by the processes on it); every
change writes an audit line.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from app.api.admin import Admin, admin_who, audit
from app.api.json import json_response
from app.gateway import Gateway
from deja.errors import NotFoundError
from deja.semantic.labelled import Label, calibration_jsonl

router = APIRouter(prefix="/admin/semantic")

#: The export's file name in the browser's download.
EXPORT_NAME = "deja-labelled-pairs.jsonl"
#: At most this many characters in a question (the rings cut theirs at 500; a pasted one may
#: be longer and is cut on saving).
QUESTION_LIMIT = 20_000


def with_label(gateway: Gateway, row: dict[str, Any]) -> dict[str, Any]:
    """``row`` (a pair with tenant, model and both questions) with its label: ``label`` is
    "same", "different" or None, ``label_id`` names it for ``DELETE``."""
    found = gateway.labels.get(row["tenant"], row["model"], row["question"], row["cached_question"])
    return {
        **row,
        "label": found.label if found is not None else None,
        "label_id": found.id if found is not None else None,
    }


class LabelBody(BaseModel):
    """One pair and its label, as the console sends it."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=QUESTION_LIMIT, description="Asked.")
    cached_question: str = Field(
        min_length=1, max_length=QUESTION_LIMIT, description="The cached entry's question."
    )
    entry_id: str = Field(min_length=1, max_length=128)
    tenant: str = Field(max_length=200)
    model: str = Field(min_length=1, max_length=200)
    similarity: float | None = Field(None, ge=-1, le=1, description="Cosine, when known.")
    score: float | None = Field(None, ge=0, le=1, description="Decision score, when known.")
    label: Literal["same", "different"]


@router.get("/served")
async def served(
    gateway: Admin,
    limit: int = Query(50, ge=1, le=500),
    tenant: str | None = None,
) -> Response:
    """The recent semantic hits of this process with both questions and any label; newest
    first."""
    rows = [
        with_label(gateway, s.pair_json())
        for s in gateway.recent.served(limit=limit, tenant=tenant)
    ]
    return json_response({"served": rows})


@router.post("/labels")
async def add_label(body: LabelBody, gateway: Admin) -> Response:
    """Label one pair (again: the new label replaces the old)."""
    label = await gateway.labels.add(
        Label(
            at=round(time.time(), 3),
            tenant=body.tenant,
            model=body.model,
            question=body.question,
            cached_question=body.cached_question,
            entry_id=body.entry_id,
            similarity=body.similarity,
            score=body.score,
            same=body.label == "same",
            who=admin_who(gateway),
        )
    )
    audit(
        gateway,
        "semantic.label",
        label=label.label,
        pair=label.id,
        entry_id=label.entry_id,
        tenant=label.tenant,
    )
    return json_response(label.as_json())


@router.get("/labels")
async def list_labels(
    gateway: Admin,
    limit: int = Query(100, ge=1, le=10_000),
    tenant: str | None = None,
) -> Response:
    """The labelled pairs, newest first; ``total`` counts them all (of ``tenant``)."""
    labels = await gateway.labels.recent(tenant=tenant)
    return json_response(
        {
            "total": len(labels),
            "same": sum(x.same for x in labels),
            "labels": [x.as_json() for x in labels[:limit]],
        }
    )


@router.get("/labels/export")
async def export_labels(gateway: Admin, tenant: str | None = None) -> Response:
    """Every labelled pair (of ``tenant``) as the JSONL file ``deja calibrate --pairs`` reads:
    ``{"a": cached, "b": asked, "duplicate": same}`` a line, oldest first, as a download."""
    labels = await gateway.labels.recent(tenant=tenant)
    return Response(
        calibration_jsonl(labels),
        media_type="application/x-ndjson",
        headers={"content-disposition": f'attachment; filename="{EXPORT_NAME}"'},
    )


@router.delete("/labels/{pair}")
async def remove_label(pair: str, gateway: Admin) -> Response:
    """Forget one pair's label (``id`` from the list)."""
    removed = await gateway.labels.remove(pair)
    if removed is None:
        raise NotFoundError(f"no labelled pair {pair}")
    audit(gateway, "semantic.unlabel", pair=pair, entry_id=removed.entry_id, tenant=removed.tenant)
    return json_response({"removed": removed.as_json()})
