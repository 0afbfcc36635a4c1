"""Step 2 of the request path: is the answer to this question a function of when it is asked?

A volatile question ("what changed in the latest release?", "¿qué tiempo hace hoy?") skips both
cache layers and is not stored. Detection is lexical, in English and Spanish: a list of volatile
expressions, and a list of timeless uses of the same words ("alternating current", "a current
account", "the latest time I can cancel", "el último elemento") whose spans do not count.
Deployments add their own volatile patterns in config (``temporal_extra_patterns``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

_FLAGS = re.IGNORECASE | re.UNICODE

#: Expressions whose presence makes a question time-dependent.
VOLATILE_PATTERNS: tuple[str, ...] = (
    # --- English -------------------------------------------------------------------------------
    r"\b(?:today|tonight|tomorrow|yesterday)(?:'s)?\b",
    r"\bthis (?:morning|afternoon|evening|week|weekend|month|quarter|year|season)(?:'s)?\b",
    r"\b(?:last|past) (?:night|week|weekend|month|quarter|year|hour|few days)\b",
    r"\bnext (?:week|weekend|month|quarter|year)\b",
    r"\b(?:right|just) now\b",
    r"\bnow\b",
    r"\bcurrent(?:ly)?\b",
    r"\bat (?:the|this) (?:moment|minute|time)\b",
    r"\bat present\b|\bpresently\b",
    r"\blatest\b|\bnewest\b|\bmost recent\b|\brecent(?:ly)?\b|\bup[- ]to[- ]date\b",
    r"\bso far\b|\bto date\b|\bas of (?:now|today|yet)\b|\bthese days\b|\bnowadays\b",
    r"\b(?:breaking|live) (?:news|score|scores|updates?)\b",
    # --- Spanish -------------------------------------------------------------------------------
    r"\bhoy\b|\bahora\b|\bactualmente\b|\bactual(?:es)?\b",
    r"\ben (?:este|estos) moment(?:o|os)\b",
    r"\b[uú]ltim[oa]s?\b",
    r"\bm[aá]s recientes?\b|\brecientemente\b|\brecientes?\b",
    r"\bayer\b|\banoche\b|\bma[nñ]ana\b",
    r"\best[ae] (?:semana|noche|ma[nñ]ana|tarde|mes|a[nñ]o|trimestre|momento)\b",
    r"\beste (?:fin de semana)\b",
    r"\bhasta (?:ahora|la fecha|el momento)\b",
    r"\b(?:en vivo|en directo)\b",
)

#: Timeless uses of the same words: a volatile match inside one of these spans does not count.
TIMELESS_PATTERNS: tuple[str, ...] = (
    # "current" as a physical quantity or a kind of account
    r"\b(?:alternating|direct|electric(?:al)?|eddy|ocean|sea|rip|air|jet|tidal|input|output|"
    r"leakage|bias|peak|rated|inrush) currents?\b",
    r"\bcurrents? (?:account|accounts|density|source|sources|limit|limiting|draw|flow|loop|"
    r"transformer|sensor|divider|mirror|clamp|rating|carrying)\b",
    r"\b(?:amps?|amperes?) of current\b|\bcurrent (?:in|through) (?:a|the) (?:wire|circuit|"
    r"resistor|coil|conductor)\b",
    # "latest" as a deadline, not as news
    r"\bat the latest\b",
    r"\b(?:the )?latest (?:possible|time|date|hour|day|moment|deadline|start|check-?in|"
    r"check-?out)\b",
    # discourse "now"
    r"^\s*now\b,?",
    r"\bnow that\b|\bfrom now on\b",
    # Spanish: "último" as a position, "ahora bien", "mañana" as part of the day
    r"\b[uú]ltim[oa]s? (?:elemento|elementos|posici[oó]n|car[aá]cter|caracteres|l[ií]nea|"
    r"l[ií]neas|paso|pasos|[ií]ndice|nodo|d[ií]gito|d[ií]gitos|palabra|palabras|cap[ií]tulo|"
    r"columna|columnas|fila|filas|[ií]tem|valor|byte|bytes|registro)\b",
    r"\bahora bien\b",
    r"\b(?:por|de|en) la ma[nñ]ana\b",
    r"\bvalor actual neto\b",
)


@dataclass(frozen=True, slots=True)
class Volatility:
    """Why a question was judged volatile: the expression that matched."""

    reason: str
    matched: str


class TemporalDetector:
    """Lexical detector of time-dependent questions (English and Spanish)."""

    def __init__(self, extra_patterns: Iterable[str] = (), cache_size: int = 4096) -> None:
        volatile = [*VOLATILE_PATTERNS, *extra_patterns]
        self._volatile = re.compile("|".join(f"(?:{p})" for p in volatile), _FLAGS)
        self._timeless = re.compile("|".join(f"(?:{p})" for p in TIMELESS_PATTERNS), _FLAGS)
        # Repeated questions are what a cache serves: remember recent verdicts.
        self.check = functools.lru_cache(maxsize=cache_size)(self._check)  # type: ignore[method-assign]

    def check(self, text: str) -> Volatility | None:
        """The first volatile expression not inside a timeless one, or None."""
        return self._check(text)

    def _check(self, text: str) -> Volatility | None:
        if not text:
            return None
        timeless: list[tuple[int, int]] | None = None
        for match in self._volatile.finditer(text):
            if timeless is None:
                timeless = [m.span() for m in self._timeless.finditer(text)]
            start, end = match.span()
            if not any(t_start <= start and end <= t_end for t_start, t_end in timeless):
                return Volatility(reason="temporal", matched=match.group(0))
        return None
