"""What live verdicts say about each cache entry (issue 24): a bounded record per entry, and
the cut-off it earns.

A verdict is one observation about an entry's answer served (or judged) for a question at a
decision score: the shadow re-ask agreed or not, the judge said "same" or not about a
grey-zone candidate, an app or an admin said right or wrong, an operator labelled the pair. Each
entry keeps its last ``per_entry`` verdicts; at most ``entries`` entries are remembered (least
recently told forgotten first). Memory, measured full with ``tracemalloc`` (20,000 entries ×
16 verdicts, 64-character ids): 57.2 MB, ~180 bytes a verdict with its share of the key and the
deque. Evidence is per process and lost at a restart, except operators' labels, which are kept
on disk and told again at start-up (``deja.semantic.labelled``).

**The cut-off model.** Each entry starts at the calibrated τ of the request's target (the table
fitted offline). Its evidence moves it two ways:

* *down*, into the judge's grey zone, only with enough evidence that the entry's grey-zone
  answers are right: the verdicts at grey scores (τ_floor ≤ s < τ) are read as draws of a
  Bernoulli p_e (the precision of this entry's grey-zone hits), with a Beta prior worth
  ``prior_weight`` observations centred on the judge floor's precision (what the table says of
  the grey zone as a whole). When the one-sided 95% Wilson lower bound of the posterior mean is
  at least the request's target, the entry's cut-off is the lowest score at which it was judged
  right (never under τ_floor). With the defaults and a target of 0.90 that takes 37
  "same" verdicts and no "different" one: a rule that rarely fires, by design;
* *up*, at once: an entry judged wrong at score s is never served again at or under s
  (``max(τ, s + step)``), whatever its other evidence. Wrong evidence always wins.

**What it guarantees, and on what it rests.** The lowering keeps the entry's grey-zone
precision at or above the target with 95% confidence *if* its verdicts are right and its future
grey-zone questions are like the ones judged (exchangeable); a judge of accuracy a < 1 breaks
the first assumption, which is why the prior is weighted and the bar is the lower bound, not
the mean. The raising guarantees only monotone safety: a score that once served a wrong answer
for the entry does not serve it again. A verdict about an alias counts for its entry.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from deja.semantic.curves import wilson

__all__ = ["Evidence", "Source", "Verdict", "wrong_at"]

Source = Literal["shadow", "judge", "feedback", "label"]

#: One-sided 95%.
Z = 1.645


@dataclass(frozen=True, slots=True)
class Verdict:
    """One observation: at ``score`` (None: not known, e.g. app feedback), right or not."""

    at: float
    score: float | None
    correct: bool
    source: Source
    #: What the verdict is about when a later verdict on the same thing replaces it (an
    #: operator's label names its pair: labelling the pair again replaces the first label).
    key: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "score": None if self.score is None else round(self.score, 4),
            "correct": self.correct,
            "source": self.source,
        }


def wrong_at(verdicts: Iterable[Verdict]) -> float | None:
    """The highest score at which an entry was judged wrong (None: never, or unscored)."""
    return max((v.score for v in verdicts if not v.correct and v.score is not None), default=None)


class Evidence:
    """Per-entry verdicts (bounded) and the per-entry cut-off they earn (module docstring)."""

    def __init__(
        self,
        *,
        per_entry: int = 16,
        entries: int = 20_000,
        prior_weight: float = 5.0,
        step: float = 0.01,
    ) -> None:
        self.per_entry = per_entry
        self.entries = entries
        self.prior_weight = prior_weight
        self.step = step
        self._by_entry: OrderedDict[str, deque[Verdict]] = OrderedDict()

    def record(
        self,
        entry_id: str,
        *,
        score: float | None,
        correct: bool,
        source: Source,
        key: str | None = None,
    ) -> None:
        """Add one verdict about ``entry_id`` (an alias's verdicts go to its entry). A verdict
        with a ``key`` replaces the entry's earlier verdict with that key: a re-labelled pair
        counts once, as last labelled."""
        found = self._by_entry.get(entry_id)
        if found is None:
            found = self._by_entry[entry_id] = deque(maxlen=self.per_entry)
            while len(self._by_entry) > self.entries:
                self._by_entry.popitem(last=False)
        else:
            self._by_entry.move_to_end(entry_id)
            if key is not None:
                self.withdraw(entry_id, key)
        found.append(Verdict(time.time(), score, correct, source, key))

    def withdraw(self, entry_id: str, key: str) -> bool:
        """Drop the entry's verdict with ``key`` (an operator removed the label); whether
        there was one."""
        found = self._by_entry.get(entry_id)
        kept = [v for v in found or () if v.key != key]
        if found is None or len(kept) == len(found):
            return False
        found.clear()
        found.extend(kept)
        return True

    def of(self, entry_id: str) -> tuple[Verdict, ...]:
        """The entry's verdicts, oldest first (none: empty)."""
        return tuple(self._by_entry.get(entry_id, ()))

    def __len__(self) -> int:
        return len(self._by_entry)

    def __contains__(self, entry_id: str) -> bool:
        return entry_id in self._by_entry

    def cutoff(self, entry_id: str, tau: float, floor: float, prior: float, target: float) -> float:
        """The entry's cut-off for a request whose calibrated cut-off is ``tau``: ``floor`` is
        the judge floor's τ, ``prior`` its precision, ``target`` the request's. Cheap when the
        entry has no evidence (one dict lookup): that is almost every call."""
        found = self._by_entry.get(entry_id)
        if not found:
            return tau
        wrong = wrong_at(found)
        if wrong is not None:
            return max(tau, wrong + self.step)
        grey = [v.score for v in found if v.score is not None and floor <= v.score < tau]
        if not grey or not math.isfinite(tau):
            return tau
        weight = self.prior_weight
        low, _ = wilson(len(grey) + prior * weight, len(grey) + weight, Z)
        return max(floor, min(grey)) if low >= target else tau
