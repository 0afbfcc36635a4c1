"""``GET /admin/semantic``: how semantic hits are decided right now — precision targets, θ, the
verifier and its calibration table, the judge, live precision from shadow checks, and what the
learning loop did (``/admin/semantic/corrections``: each tenant's live precision and the raise
of its target; pin or reset one)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict
from starlette.responses import Response

from app.api.admin import Admin, audit
from app.api.json import json_response
from app.gateway import Gateway
from deja.errors import InvalidRequestError
from deja.semantic.learning import Learning

router = APIRouter(prefix="/admin")


@router.get("/semantic")
async def semantic_settings(gateway: Admin) -> Response:
    settings = gateway.settings
    step = gateway.semantic_step
    report: dict[str, Any] = {
        "enabled": step is not None,
        "precision": gateway.thresholds.precision.as_json(),
        "theta": {k: v for k, v in gateway.thresholds.as_json().items() if k != "precision"},
        "top_k": step.settings.top_k if step is not None else None,
        "timeout_seconds": settings.semantic_timeout_seconds,
        "verifier": None,
        "calibration": None,
        "judge": {"mode": settings.semantic_judge, "floor": settings.semantic_judge_floor},
        "shadow": None,
        "temporal_classifier": False,
    }
    if step is None:
        return json_response(report)
    checks = step.checks
    if checks.verifier is not None:
        report["verifier"] = {"model_id": checks.verifier.model_id}
    if checks.table is not None:
        table = checks.table
        target = gateway.thresholds.precision.global_
        low, high = table.targets
        report["calibration"] = {
            **table.as_json(),
            "active_tau": table.tau(target),
            # The targets this table can serve; a change above ``high`` is refused (400).
            "targets": {"low": low, "high": high},
        }
    if checks.judge is not None:
        report["judge"].update(calls=checks.judge.calls, tokens=checks.judge.tokens)
    if checks.shadow is not None:
        report["shadow"] = checks.shadow.stats()
    report["temporal_classifier"] = checks.classifier is not None
    if checks.learning is not None:
        report["learning"] = {
            "entries_with_evidence": len(checks.learning.evidence),
            "corrections": checks.learning.correction.as_json(),
        }
    return json_response(report)


def _learning(gateway: Gateway) -> Learning:
    if gateway.learning is None:
        raise InvalidRequestError("the learning loop needs the semantic layer and its verifier")
    return gateway.learning


@router.get("/semantic/corrections")
async def corrections(gateway: Admin) -> Response:
    """Each tenant's live precision (verdicts on served hits, a Wilson 95% interval), how far
    its target was raised because of it, whether ops pinned it, and its last moves."""
    return json_response(_learning(gateway).correction.as_json())


class Pin(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pinned: bool


@router.put("/semantic/corrections/{tenant}")
async def pin_correction(tenant: str, spec: Pin, gateway: Admin) -> Response:
    """Pin a tenant (its target stops moving; what it earned stays) or let it move again."""
    correction = _learning(gateway).correction
    correction.pin(tenant, spec.pinned)
    audit(gateway, "semantic.correction.pin", tenant=tenant, pinned=spec.pinned)
    return json_response(correction.as_json()["tenants"][tenant])


@router.delete("/semantic/corrections/{tenant}")
async def reset_correction(tenant: str, gateway: Admin) -> Response:
    """Serve the tenant at the target ops set again, with a fresh window of verdicts."""
    correction = _learning(gateway).correction
    correction.reset(tenant)
    audit(gateway, "semantic.correction.reset", tenant=tenant)
    return json_response({"tenant": tenant, "raised": 0.0})
