"""Live precision that acts (issue 24): when a tenant's served hits are measured below its
precision target, its cut-off rises until they are not.

Each verdict on a *served* semantic hit (a shadow re-ask, app or admin feedback, an operator's
label of a served pair) is one Bernoulli draw of the tenant's live precision. The last
``window`` of them give a Wilson 95% interval. When at least ``min_verdicts`` are in and the
interval's upper bound is under the tenant's target, the target the tenant is served at rises
by ``step`` (so τ rises with it, through the calibration table), at most to the table's highest
target; the window then starts again, so the next move is decided by hits served at the new
cut-off only. Every move writes an audit line (``semantic.correction``, who ``deja``) and
counts on ``deja_precision_corrections_total``; the console shows a banner while any tenant is
corrected. Ops can pin a tenant (no more moves, its correction kept) and reset it (back to the
target they set).

It only ever raises: a cut-off that is too strict loses hits, one that is too loose serves
wrong answers, and only the second is worth acting on without a person. Everything here is
in memory and per process; a request pays one dict lookup (:meth:`Correction.target`).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deja.semantic.curves import wilson

__all__ = ["Correction", "TenantPrecision"]

log = logging.getLogger("deja.semantic")

Z = 1.96  # a two-sided 95% interval; its upper bound decides


@dataclass(slots=True)
class TenantPrecision:
    """One tenant's recent verdicts and what they did to its target."""

    verdicts: deque[bool]
    pinned: bool = False
    moves: list[dict[str, Any]] = field(default_factory=list)

    def interval(self) -> tuple[float, float] | None:
        if not self.verdicts:
            return None
        return wilson(sum(self.verdicts), len(self.verdicts), Z)


class Correction:
    """Per-tenant live precision and the raise of the target it has earned."""

    def __init__(
        self,
        *,
        high: float,
        window: int = 200,
        min_verdicts: int = 30,
        step: float = 0.01,
        on_move: Callable[[dict[str, Any]], None] | None = None,
        on_count: Callable[[], None] | None = None,
    ) -> None:
        self.high = high
        self.window = window
        self.min_verdicts = min_verdicts
        self.step = step
        self.on_move = on_move
        self.on_count = on_count
        self._tenants: dict[str, TenantPrecision] = {}
        #: tenant → how much its target is raised (read on every semantic lookup).
        self._raised: dict[str, float] = {}

    def target(self, tenant: str, target: float) -> float:
        """The target ``tenant`` is served at: its own, raised by what live precision earned."""
        raised = self._raised.get(tenant)
        return target if raised is None else min(self.high, target + raised)

    def observe(self, tenant: str, correct: bool, target: float) -> None:
        """One verdict on a hit served to ``tenant`` whose target (before correction) is
        ``target``; may raise the tenant's target."""
        state = self.state(tenant)
        state.verdicts.append(correct)
        if state.pinned or len(state.verdicts) < self.min_verdicts:
            return
        raised = self._raised.get(tenant, 0.0)
        served_at = min(self.high, target + raised)
        interval = state.interval()
        if interval is None or interval[1] >= served_at or served_at >= self.high - 1e-9:
            return
        raised = self._raised[tenant] = round(min(self.high - target, raised + self.step), 6)
        move: dict[str, Any] = {
            "tenant": tenant,
            "precision": round(sum(state.verdicts) / len(state.verdicts), 4),
            "interval": [round(interval[0], 4), round(interval[1], 4)],
            "verdicts": len(state.verdicts),
            "from": round(served_at, 4),
            "to": round(min(self.high, target + raised), 4),
        }
        state.moves.append(move)
        state.verdicts.clear()
        log.warning(
            "live precision of tenant %s is %.3f (95%% interval %.3f-%.3f over %d verdicts), "
            "under its target %.2f: serving it at %.2f",
            tenant,
            move["precision"],
            *move["interval"],
            move["verdicts"],
            served_at,
            move["to"],
        )
        if self.on_count is not None:
            self.on_count()
        if self.on_move is not None:
            self.on_move(move)

    def pin(self, tenant: str, pinned: bool) -> None:
        """Stop (or resume) moving ``tenant``'s target; what it earned so far stays."""
        self.state(tenant).pinned = pinned

    def state(self, tenant: str) -> TenantPrecision:
        """``tenant``'s window, made empty the first time."""
        state = self._tenants.get(tenant)
        if state is None:
            state = self._tenants[tenant] = TenantPrecision(deque(maxlen=self.window))
        return state

    def reset(self, tenant: str) -> None:
        """Back to the target ops set, with a fresh window (a pin stays)."""
        state = self._tenants.get(tenant)
        self._raised.pop(tenant, None)
        if state is not None:
            state.verdicts.clear()

    def as_json(self) -> dict[str, Any]:
        """Per tenant: live precision, its interval, verdicts, the raise, pinned, moves."""
        out: dict[str, Any] = {}
        for tenant, state in sorted(self._tenants.items()):
            interval = state.interval()
            n = len(state.verdicts)
            out[tenant] = {
                "precision": round(sum(state.verdicts) / n, 4) if n else None,
                "interval": None if interval is None else [round(x, 4) for x in interval],
                "verdicts": n,
                "raised": self._raised.get(tenant, 0.0),
                "pinned": state.pinned,
                "moves": state.moves[-10:],
            }
        return {
            "window": self.window,
            "min_verdicts": self.min_verdicts,
            "step": self.step,
            "tenants": out,
        }
