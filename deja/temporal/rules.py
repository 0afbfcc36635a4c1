"""The temporal bypass rules: is the answer to this question a function of when it is asked?

A volatile question ("what changed in the latest release?", "¿qué tiempo hace hoy?") skips both
cache layers and is not stored. Detection is lexical, in English and Spanish: a list of volatile
expressions, and a list of timeless uses of the same words ("alternating current", "a current
account", "the latest time I can cancel", "el último elemento", "how do you say 'today' in
French") whose spans do not count.
Deployments add their own volatile patterns in config (``temporal_extra_patterns``).

Volatile families: relative dates and weekdays; the time or date itself; what comes next
(next / upcoming / próximo); whether something has happened yet (yet / already / ya / todavía
/ aún); change since a point in time (since last week / desde el lunes); current state (still /
as of / sigue); this quarter or season; latest / newest / último; prices and rates; scores and
results; weather; news; open or closed now; who holds a post now; countdowns; ages relative to
now.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from deja.temporal.timeless import TIMELESS_PATTERNS
from deja.temporal.volatile import VOLATILE_PATTERNS

#: How every pattern is compiled.
FLAGS = re.IGNORECASE | re.UNICODE

#: How much of a message the rules read.
MAX_CHARS = 2048


@dataclass(frozen=True, slots=True)
class Volatility:
    """Why a question was judged volatile: the expression that matched."""

    reason: str
    matched: str


class TemporalDetector:
    """Lexical detector of time-dependent questions (English and Spanish)."""

    def __init__(self, extra_patterns: Iterable[str] = (), cache_size: int = 4096) -> None:
        volatile = [*VOLATILE_PATTERNS, *extra_patterns]
        # Every pattern is scanned on its own: a match swallowed by a timeless span must not hide
        # another pattern's match, and timeless spans may overlap each other. One combined regex
        # first answers "could any pattern match at all?" (if no alternative matches, no pattern
        # does), and most questions stop there. Python's re gains little from the alternation:
        # on 2,000 qqp_dev questions, 201 µs a question with it, 245 µs without (11 µs for the
        # rules before the new families); verdicts are cached, so a repeated question pays none.
        anonymous = (p.replace("(?P<w>", "(?:") for p in volatile)
        self._any = re.compile("|".join(f"(?:{p})" for p in anonymous), FLAGS)
        self._volatile = tuple(re.compile(p, FLAGS) for p in volatile)
        self._timeless = tuple(re.compile(p, FLAGS) for p in TIMELESS_PATTERNS)
        # Repeated questions are what a cache serves: remember recent verdicts.
        self.check = functools.lru_cache(maxsize=cache_size)(self._check)  # type: ignore[method-assign]

    def check(self, text: str) -> Volatility | None:
        """The first volatile expression (in pattern order) not inside a timeless one, or None."""
        return self._check(text)

    def _check(self, text: str) -> Volatility | None:
        if not text:
            return None
        # A question is short; a pasted document is not, and scanning it all would block the
        # event loop (about 3 ms per 1,000 characters). Its first MAX_CHARS decide.
        text = text[:MAX_CHARS].replace("\u2019", "'")  # curly apostrophe: same spans
        if self._any.search(text) is None:
            return None
        timeless: list[tuple[int, int]] | None = None
        for pattern in self._volatile:
            for match in pattern.finditer(text):
                if timeless is None:
                    timeless = [m.span() for p in self._timeless for m in p.finditer(text)]
                # a pattern may name its decisive word (?P<w>...): only that word must be free
                start, end = match.span("w") if "w" in pattern.groupindex else match.span()
                if not any(t_start <= start and end <= t_end for t_start, t_end in timeless):
                    return Volatility(reason="temporal", matched=match.group(0))
        return None
