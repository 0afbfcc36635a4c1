"""What a θ or precision-target change would buy, before it is saved.

Two estimates, side by side, because each answers a different question:

- **recent traffic**: the recent lookups (``deja.observability.lookups``) replayed under the
  current and the proposed settings. Exact for raising θ or the target; a lookup whose best
  candidate was never verified (it was under the old θ) cannot be judged under a lower θ and is
  counted as ``unknown`` rather than guessed.
- **calibration**: the calibration table's measured hit rate at the proposed precision target
  (held-out labelled pairs, ``calibration.json``), which holds for traffic like the pairs it was
  measured on.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable
from typing import Any

from deja.observability.lookups import LookupSample
from deja.semantic.cutoffs import CalibrationTable
from deja.tenancy.thresholds import Thresholds


def proposed(current: Thresholds, change: dict[str, Any]) -> Thresholds:
    """A copy of ``current`` with ``change`` applied (the body of ``PUT /admin/threshold``);
    raises ``InvalidRequestError`` on a bad value, as saving would."""
    candidate = copy.deepcopy(current)
    candidate.apply(change)
    return candidate


def would_serve(
    sample: LookupSample, thresholds: Thresholds, table: CalibrationTable | None
) -> bool | None:
    """Whether ``sample``'s best candidate is served under ``thresholds``; None: unknowable."""
    if sample.similarity is None:
        return False
    theta = thresholds.resolve(sample.tenant, sample.model, sample.tenant_theta)
    if sample.similarity < theta:
        return False
    if table is None:
        return True  # cosine alone decides
    if sample.score is None:
        return None  # never verified: its decision score is not known
    tau = table.tau(thresholds.precision.resolve(sample.tenant, sample.model))
    return sample.score >= tau


def _decide(
    samples: list[LookupSample], thresholds: Thresholds, table: CalibrationTable | None
) -> dict[str, Any]:
    served = unknown = 0
    for s in samples:
        verdict = would_serve(s, thresholds, table)
        if verdict is None:
            unknown += 1
        elif verdict:
            served += 1
    n = len(samples)
    return {
        "served": served,
        "unknown": unknown,
        "hit_rate": round(served / n, 4) if n else None,
    }


def preview(
    samples: Iterable[LookupSample],
    current: Thresholds,
    change: dict[str, Any],
    table: CalibrationTable | None,
    *,
    tenant: str | None = None,
    model: str | None = None,
) -> dict[str, Any]:
    """The expected semantic hit rate of recent lookups now and under ``change``, and the
    calibration table's figure for the proposed target. ``tenant``/``model`` pick the
    lookups (and the level whose target the calibration figure reports)."""
    after = proposed(current, change)
    kept = list(samples)
    report: dict[str, Any] = {
        "lookups": len(kept),
        "observed": {
            "served": sum(s.served for s in kept),
            "hit_rate": round(sum(s.served for s in kept) / len(kept), 4) if kept else None,
        },
        "current": _decide(kept, current, table),
        "proposed": _decide(kept, after, table),
        "theta": {
            "current": current.resolve(tenant or "", model or ""),
            "proposed": after.resolve(tenant or "", model or ""),
        },
        "calibration": None,
    }
    if table is not None:
        report["calibration"] = {
            "current": _calibration_point(
                table, current.precision.resolve(tenant or "", model or "")
            ),
            "proposed": _calibration_point(
                table, after.precision.resolve(tenant or "", model or "")
            ),
        }
    return report


def _calibration_point(table: CalibrationTable, target: float) -> dict[str, Any]:
    """The table's row for ``target``: τ and the hit rate it measured (None: unreachable)."""
    tau = table.tau(target)
    hit_rate = None
    for row in table.rows:
        if row.tau is not None and math.isclose(row.tau, tau):
            hit_rate = row.hit_rate
            break
    return {
        "target": target,
        "tau": None if math.isinf(tau) else tau,
        "hit_rate": hit_rate if not math.isinf(tau) else 0.0,
    }
