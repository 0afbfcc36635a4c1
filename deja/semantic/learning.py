"""The cache's learning loop in one place (issue 24): verdicts in, cut-offs out.

Verdicts come from the judge (grey-zone candidates, not served), shadow re-asks, app and admin
feedback and operators' labels (served hits, or pairs they saw). Each goes to the entry's
evidence (``deja.semantic.evidence``: the entry's own cut-off) and, when it is about a hit that
was served, to its tenant's live precision (``deja.semantic.correction``: the tenant's target).
The semantic step asks :meth:`Learning.target` and :meth:`Learning.cutoff` on every lookup:
two dict lookups when nothing was learnt.
"""

from __future__ import annotations

from deja.semantic.correction import Correction
from deja.semantic.cutoffs import CalibrationTable
from deja.semantic.evidence import Evidence, Source
from deja.tenancy.thresholds import Thresholds

__all__ = ["Learning"]


class Learning:
    """Evidence per entry and live precision per tenant, read on the request path."""

    def __init__(
        self,
        evidence: Evidence,
        correction: Correction,
        thresholds: Thresholds,
        table: CalibrationTable,
        judge_floor: float,
    ) -> None:
        self.evidence = evidence
        self.correction = correction
        self.thresholds = thresholds
        self.table = table
        self.judge_floor = judge_floor

    def target(self, tenant: str, model: str) -> float:
        """The precision target a lookup of ``tenant`` is decided at (corrected)."""
        return self.correction.target(tenant, self.thresholds.precision.resolve(tenant, model))

    def cutoff(self, entry_id: str, tau: float, target: float) -> float:
        """The cut-off of one candidate's entry (its evidence moves it from ``tau``)."""
        if entry_id not in self.evidence:
            return tau
        floor = self.judge_floor
        low = self.table.tau(min(floor, target))
        return self.evidence.cutoff(entry_id, tau, low, floor, target)

    def served(
        self,
        tenant: str,
        model: str,
        entry_id: str,
        *,
        score: float | None,
        correct: bool,
        source: Source,
    ) -> None:
        """A verdict on a hit that was served: the entry's evidence and the tenant's live
        precision."""
        self.evidence.record(entry_id, score=score, correct=correct, source=source)
        base = self.thresholds.precision.resolve(tenant, model)
        self.correction.observe(tenant, correct, base)

    def judged(
        self,
        entry_id: str,
        *,
        score: float | None,
        same: bool,
        source: Source,
        key: str | None = None,
    ) -> None:
        """A verdict on a pair that was not served (the judge on a grey-zone candidate, a
        label on a near miss): the entry's evidence only. ``key`` names the pair when a later
        verdict on it replaces this one (an operator's label)."""
        self.evidence.record(entry_id, score=score, correct=same, source=source, key=key)

    def withdrawn(self, entry_id: str, key: str) -> None:
        """The verdict named ``key`` no longer holds (an operator removed their label)."""
        self.evidence.withdraw(entry_id, key)
