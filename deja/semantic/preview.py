"""What a θ or precision-target change would buy, before it is saved.

Two estimates, side by side, because each answers a different question:

- **recent traffic**: the recent lookups (``deja.observability.lookups``) replayed under the
  current and the proposed settings. Exact for raising θ or the target; a lookup whose best
  candidate was never verified (it was under the old θ) cannot be judged under a lower θ and is
  counted as ``unknown`` rather than guessed.
- **calibration**: the calibration table's measured hit rate at the proposed precision target
  (held-out labelled pairs, ``calibration.json``), which holds for traffic like the pairs it was
  measured on.

Beside the figures, the pairs behind them: the recent lookups the change would **start**
serving (a miss now, a hit under it) and **stop** serving, each with both questions, so a
wrong pair is seen (and labelled) before the change is saved.
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


#: How many pairs each of the ``start`` and ``stop`` lists shows.
PAIR_LIMIT = 50


def flips(
    samples: list[LookupSample],
    current: Thresholds,
    after: Thresholds,
    table: CalibrationTable | None,
    limit: int = PAIR_LIMIT,
) -> dict[str, Any]:
    """The lookups ``after`` would start and stop serving, highest score first (the cosine where
    no score), one row per pair asked (its newest lookup, with how often it was asked); a
    lookup whose verdict is unknowable on either side is in neither list."""
    start: dict[tuple[str, str, str, str], tuple[LookupSample, int]] = {}
    stop: dict[tuple[str, str, str, str], tuple[LookupSample, int]] = {}
    for s in samples:
        c = s.candidate
        now, then = would_serve(s, current, table), would_serve(s, after, table)
        if c is None or now is None or then is None or now == then:
            continue
        rows = start if then else stop
        key = (s.tenant, s.model, c.question, c.entry_id)
        rows[key] = (s, rows.get(key, (s, 0))[1] + 1)
    return {
        "start_total": len(start),
        "stop_total": len(stop),
        "start": _ranked(start.values(), limit),
        "stop": _ranked(stop.values(), limit),
    }


def _ranked(rows: Iterable[tuple[LookupSample, int]], limit: int) -> list[dict[str, Any]]:
    def rank(row: tuple[LookupSample, int]) -> float:
        c = row[0].candidate
        assert c is not None
        return c.score if c.score is not None else c.similarity

    best = sorted(rows, key=rank, reverse=True)[:limit]
    return [{**s.pair_json(), "lookups": n} for s, n in best]


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
        **flips(kept, current, after, table),
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
