"""Admin views of recent activity, for the console and for scripts: the traffic timeline, the
score histograms of recent semantic lookups, near misses, the expected hit rate of a θ or
precision change before it is saved, and the recent admin actions.

All of it is per process and in memory (``deja/observability/timeline.py``, ``lookups.py``,
``audit.py``): with N gateway processes each reports its own share.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from starlette.responses import Response

from app.api.admin import Admin
from app.api.admin_labels import with_label
from app.api.json import json_response
from app.gateway import Gateway
from deja.errors import InvalidRequestError
from deja.semantic.cutoffs import CalibrationTable
from deja.semantic.preview import preview

router = APIRouter(prefix="/admin")


def _table(gateway: Gateway) -> CalibrationTable | None:
    step = gateway.semantic_step
    return step.checks.table if step is not None else None


@router.get("/timeline")
async def timeline(gateway: Admin) -> Response:
    """Requests by cache outcome, tokens and model seconds saved, and each replica's
    prefix-cache hit rate, one point per ``console_sample_seconds``; and the totals now."""
    return json_response(gateway.timeline.as_json())


@router.get("/semantic/lookups")
async def lookups(gateway: Admin, tenant: str | None = None) -> Response:
    """Histograms of the best cosine and the best decision score of recent semantic lookups
    (served and not), with the global θ and the verifier cut-off τ to mark on them."""
    table = _table(gateway)
    thresholds = gateway.thresholds
    target = thresholds.precision.resolve(tenant or "", "")
    tau = table.tau(target) if table is not None else None
    return json_response(
        {
            **gateway.recent.histograms(tenant),
            "enabled": gateway.semantic_step is not None,
            "theta": thresholds.resolve(tenant or "", ""),
            "precision_target": target,
            "tau": tau if tau is None or tau != float("inf") else None,
            "verified": table is not None,
        }
    )


@router.get("/semantic/near-misses")
async def near_misses(
    gateway: Admin,
    limit: int = Query(50, ge=1, le=500),
    margin: float | None = Query(None, gt=0, le=1),
    tenant: str | None = None,
) -> Response:
    """Recent misses whose best candidate fell less than ``margin`` under its cut-off, with
    the cached question it nearly matched and any label ops gave the pair; newest first."""
    misses = gateway.recent.near_misses(limit=limit, margin=margin, tenant=tenant)
    rows = [with_label(gateway, m.as_json()) for m in misses]
    return json_response({"margin": margin or gateway.recent.margin, "near_misses": rows})


@router.post("/threshold/preview")
async def threshold_preview(
    change: dict[str, Any],
    gateway: Admin,
    tenant: str | None = None,
    model: str | None = None,
) -> Response:
    """What ``PUT /admin/threshold`` with the same body would do to the semantic hit rate:
    recent lookups replayed now and under the change, and the calibration table's figure.
    Nothing is saved. ``tenant``/``model`` restrict the lookups to that level's traffic.
    ``start`` and ``stop`` list the pairs it would start and stop serving, with their labels."""
    unknown = set(change) - {"global", "tenants", "models", "precision"}
    if unknown:
        raise InvalidRequestError(f"unknown fields: {sorted(unknown)}")
    samples = gateway.recent.recent(tenant, model)
    report = preview(
        samples, gateway.thresholds, change, _table(gateway), tenant=tenant, model=model
    )
    for side in ("start", "stop"):
        report[side] = [with_label(gateway, row) for row in report[side]]
    return json_response(report)


@router.get("/audit")
async def audit_trail(
    gateway: Admin,
    limit: int = Query(100, ge=1, le=500),
    action: str | None = None,
) -> Response:
    """The recent admin actions of this process, newest first (the durable record is the
    ``deja.audit`` log)."""
    return json_response({"actions": gateway.audit_trail.recent(limit, action)})
