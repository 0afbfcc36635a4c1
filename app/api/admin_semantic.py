"""``GET /admin/semantic``: how semantic hits are decided right now — precision targets, θ, the
verifier and its calibration table, the judge, and live precision from shadow checks."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

from app.api.admin import Admin
from app.api.json import json_response

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
    return json_response(report)
