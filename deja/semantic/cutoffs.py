"""Precision targets → cut-offs, from the calibration table shipped with the verifier.

Ops set a precision target (``DEJA_SEMANTIC_PRECISION``, per tenant and per model like θ) rather
than a raw threshold. The table, measured in cache mode on labelled pairs the model was not
trained on (``training/verifier``, or a team's own pairs with ``deja calibrate``), lists for each
target on a 0.01 grid the least decision-score cut-off τ whose measured precision reached it.
A target between grid points takes the next one up, so the promise errs on the strict side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from deja.errors import VerifierError, describe
from deja.semantic.mismatch import HARD_KINDS, Signals, kinds_mask

CALIBRATION_FILE = "calibration.json"
GRID = 100  # targets are compared on a 0.01 grid


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, x))))


@dataclass(frozen=True, slots=True)
class CutoffRow:
    precision: float
    tau: float | None
    hit_rate: float | None
    #: The two-sided interval of the precision measured at τ on the calibration split: what
    #: to expect on new traffic like it.
    interval: tuple[float, float] | None = None


@dataclass(frozen=True, slots=True)
class CalibrationTable:
    """How candidates are chosen and scored, and the τ for each precision target."""

    k: int
    cosine_floor: float
    max_tokens: int
    decision: Literal["verifier", "combined"]
    w_logit: float
    w_cosine: float
    bias: float
    skip_verification_above: float | None
    model_sha256: str
    fitted_on: str
    rows: tuple[CutoffRow, ...]
    #: Weights of the soft mismatch signals (:meth:`Signals.features`) in the combination.
    w_negation: float = 0.0
    w_extra_entity: float = 0.0
    #: Hard mismatch kinds that veto a candidate whatever the model says (score 0).
    vetoes: tuple[str, ...] = ()

    def vetoed(self, signals: Signals) -> bool:
        """A vetoing mismatch (a number, unit, symbol … the query does not share): the
        candidate scores 0 whatever the model says, so the model need not be asked."""
        return bool(signals.mask & kinds_mask(self.vetoes))

    def score(self, logit: float, cosine: float, signals: Signals | None = None) -> float:
        """The decision score of one candidate, a probability in [0, 1]. A candidate with a
        vetoing mismatch (:meth:`vetoed`) scores 0."""
        if signals is not None and self.vetoed(signals):
            return 0.0
        if self.decision == "verifier":
            return sigmoid(logit)
        z = self.w_logit * logit + self.w_cosine * cosine + self.bias
        if signals is not None:
            negation, extra = signals.features()
            z += self.w_negation * negation + self.w_extra_entity * extra
        return sigmoid(z)

    @property
    def targets(self) -> tuple[float, float]:
        """The least and greatest precision target the table can serve."""
        reachable = [r.precision for r in self.rows if r.tau is not None]
        return (min(reachable), max(reachable)) if reachable else (1.0, 0.0)

    def tau(self, target: float) -> float:
        """The cut-off for ``target``: the row at the next grid point up. ``math.inf`` (no hit
        passes) when the table never measured that much precision."""
        key = math.ceil(round(target * GRID, 6)) / GRID
        for row in self.rows:
            if row.precision >= key - 1e-9:
                return row.tau if row.tau is not None else math.inf
        return math.inf

    def as_json(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "cosine_floor": self.cosine_floor,
            "decision": self.decision,
            "combined": None
            if self.decision == "verifier"
            else {
                "w_logit": self.w_logit,
                "w_cosine": self.w_cosine,
                "bias": self.bias,
                "w_negation": self.w_negation,
                "w_extra_entity": self.w_extra_entity,
            },
            "vetoes": list(self.vetoes),
            "skip_verification_above": self.skip_verification_above,
            "model_sha256": self.model_sha256,
            "fitted_on": self.fitted_on,
            "table": [
                {
                    "precision": r.precision,
                    "tau": r.tau,
                    "hit_rate": r.hit_rate,
                    "interval": None if r.interval is None else list(r.interval),
                }
                for r in self.rows
            ],
        }


def _number(doc: dict[str, Any], name: str, where: Path) -> float:
    value = doc.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise VerifierError(f"calibration table {where}: '{name}' must be a number")
    return float(value)


def parse_table(doc: Any, where: Path) -> CalibrationTable:
    """Validate a calibration document (see ``CALIBRATION_FILE``) into a table."""
    if not isinstance(doc, dict) or not isinstance(doc.get("table"), list) or not doc["table"]:
        raise VerifierError(f"calibration table {where}: expected an object with a 'table' list")
    rows = []
    for i, row in enumerate(doc["table"]):
        if not isinstance(row, dict):
            raise VerifierError(f"calibration table {where}: row {i} is not an object")
        tau = row.get("tau")
        if tau is not None and not isinstance(tau, int | float):
            raise VerifierError(f"calibration table {where}: row {i} 'tau' must be a number")
        hit = row.get("hit_rate")
        rows.append(
            CutoffRow(
                _number(row, "precision", where),
                None if tau is None else float(tau),
                float(hit) if isinstance(hit, int | float) else None,
                _interval(row.get("interval"), i, where),
            )
        )
    rows.sort(key=lambda r: r.precision)
    combined = doc.get("combined") or {}
    decision = doc.get("decision", "verifier")
    if decision not in ("verifier", "combined"):
        raise VerifierError(f"calibration table {where}: unknown decision {decision!r}")
    skip = doc.get("skip_verification_above")
    vetoes = doc.get("vetoes") or []
    if not isinstance(vetoes, list) or any(v not in HARD_KINDS for v in vetoes):
        raise VerifierError(
            f"calibration table {where}: 'vetoes' must be a list of {', '.join(HARD_KINDS)}"
        )
    return CalibrationTable(
        k=int(_number(doc, "k", where)),
        cosine_floor=_number(doc, "cosine_floor", where),
        max_tokens=int(doc.get("max_tokens", 64)),
        decision=decision,
        w_logit=float(combined.get("w_logit", 1.0)),
        w_cosine=float(combined.get("w_cosine", 0.0)),
        bias=float(combined.get("bias", 0.0)),
        skip_verification_above=float(skip) if isinstance(skip, int | float) else None,
        model_sha256=str(doc.get("model_sha256", "")),
        fitted_on=str(doc.get("fitted_on", "")),
        rows=tuple(rows),
        w_negation=float(combined.get("w_negation", 0.0)),
        w_extra_entity=float(combined.get("w_extra_entity", 0.0)),
        vetoes=tuple(vetoes),
    )


def _interval(value: Any, i: int, where: Path) -> tuple[float, float] | None:
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    ):
        raise VerifierError(f"calibration table {where}: row {i} 'interval' must be [low, high]")
    return (float(value[0]), float(value[1]))


def load_table(path: Path) -> CalibrationTable:
    try:
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise VerifierError(f"cannot read calibration table {path}: {describe(exc)}") from exc
    return parse_table(doc, path)
