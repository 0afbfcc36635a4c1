"""The workload ``deja tune`` drives: prompt and output length distributions and a concurrency.

Lengths come from flags (``N`` or ``MIN:MAX``, uniform), from a profile, or from the gateway's
own recorded traffic: deja keeps ``deja_prompt_tokens`` and ``deja_completion_tokens``
histograms per model, and :func:`workload_from_gateway` samples from their buckets.
Every cell of a grid gets the same seeded request sequence.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from deja.errors import TuningError
from sim.virtual import VirtualRequest
from tuning.promtext import Scrape

__all__ = ["COMPLETION_METRIC", "PROMPT_METRIC", "LengthDist", "Workload", "workload_from_gateway"]

PROMPT_METRIC = "deja_prompt_tokens"
COMPLETION_METRIC = "deja_completion_tokens"


@dataclass(frozen=True, slots=True)
class LengthDist:
    """A length distribution: uniform over ``[low, high]``, or weighted buckets of that."""

    spec: str
    buckets: tuple[tuple[int, int, float], ...]
    """``(low, high, weight)``; one bucket for a fixed or uniform spec."""

    @classmethod
    def parse(cls, spec: str, what: str = "length") -> LengthDist:
        """``"512"`` (fixed) or ``"256:2048"`` (uniform, both ends included)."""
        text = spec.strip()
        try:
            low_s, _, high_s = text.partition(":")
            low = int(low_s)
            high = int(high_s) if high_s else low
        except ValueError:
            raise TuningError(f"{what}: expected N or MIN:MAX tokens, got {spec!r}") from None
        if low < 1 or high < low:
            raise TuningError(f"{what}: need 1 <= MIN <= MAX, got {spec!r}")
        return cls(text, ((low, high, 1.0),))

    @classmethod
    def from_histogram(cls, cumulative: Sequence[tuple[float, float]], what: str) -> LengthDist:
        """From Prometheus buckets ``(le, cumulative count)``; a ``+Inf`` bucket's values are
        taken as up to twice its lower bound."""
        buckets: list[tuple[int, int, float]] = []
        previous_le, previous_count = 0.0, 0.0
        for le, count in sorted(cumulative):
            weight = count - previous_count
            low = int(previous_le) + 1
            high = int(le) if le != float("inf") else max(2 * int(previous_le), low)
            if weight > 0:
                buckets.append((low, max(high, low), weight))
            previous_le, previous_count = le, count
        if not buckets:
            raise TuningError(f"{what}: the gateway has recorded no requests yet")
        spec = "histogram(" + ", ".join(f"{lo}-{hi}:{w:g}" for lo, hi, w in buckets) + ")"
        return cls(spec, tuple(buckets))

    def sample(self, rng: random.Random) -> int:
        weights = [w for _, _, w in self.buckets]
        low, high, _ = rng.choices(self.buckets, weights=weights)[0]
        return rng.randint(low, high)

    @property
    def mean(self) -> float:
        total = sum(w for _, _, w in self.buckets)
        return sum((lo + hi) / 2 * w for lo, hi, w in self.buckets) / total


@dataclass(frozen=True, slots=True)
class Workload:
    """Lengths, concurrency and the seed of the request sequence."""

    prompt: LengthDist
    output: LengthDist
    concurrency: int
    max_model_len: int = 32768
    seed: int = 0
    source: str = "flags"

    def requests(self, n: int) -> list[VirtualRequest]:
        """``n`` requests, the same for every cell; prompt + output fit ``max_model_len``."""
        rng = random.Random(self.seed)
        out: list[VirtualRequest] = []
        for _ in range(n):
            prompt = min(self.prompt.sample(rng), self.max_model_len - 1)
            output = max(min(self.output.sample(rng), self.max_model_len - prompt), 1)
            out.append(VirtualRequest(prompt, output))
        return out

    def describe(self) -> dict[str, Any]:
        """What identifies this workload (kept in the results file, compared on resume)."""
        return {
            "prompt_tokens": self.prompt.spec,
            "output_tokens": self.output.spec,
            "concurrency": self.concurrency,
            "max_model_len": self.max_model_len,
            "seed": self.seed,
            "source": self.source,
        }


def workload_from_gateway(
    scrape: Scrape, model: str | None, concurrency: int, *, max_model_len: int, seed: int = 0
) -> tuple[Workload, str]:
    """A workload from a gateway's token histograms; returns it and the model it is for (the
    busiest one when ``model`` is None)."""
    counts = scrape.label_totals(PROMPT_METRIC + "_count", "model")
    if not counts:
        raise TuningError(f"the gateway's /metrics has no {PROMPT_METRIC} histogram with traffic")
    if model is None:
        model = max(counts, key=lambda m: counts[m])
    elif model not in counts:
        raise TuningError(f"the gateway has recorded no traffic for model {model!r}")
    prompt = LengthDist.from_histogram(scrape.buckets(PROMPT_METRIC, model=model), "prompt")
    output = LengthDist.from_histogram(scrape.buckets(COMPLETION_METRIC, model=model), "output")
    workload = Workload(prompt, output, concurrency, max_model_len, seed, source=f"gateway:{model}")
    return workload, model
