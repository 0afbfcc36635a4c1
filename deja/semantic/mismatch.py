"""Surface checks between a query and a cached question: the words a cross-encoder can miss.

A cached answer to "mastering C++?" is wrong for "mastering C?", and one for "5 km" wrong for
"5 miles", however close the two questions read. These checks look only at the two texts:

- :func:`tokens`: symbols, digits and units are words ("c", "c++", "c#", "5", "-5", "15",
  "%" are all different tokens); only sentence punctuation (``?!.,;:¿¡`` and quotes) and case
  are dropped. :func:`deja.semantic.verifier.same_words` compares these.
- :func:`compare` → :class:`Signals`: number, unit, ordinal, symbol and named-entity
  mismatches, antonym pairs, negation differences and reorderings (the same words in another
  order: "from X to Y" / "from Y to X"). The decision (:mod:`deja.semantic.cutoffs`) vetoes a
  candidate with a *hard* mismatch and uses the soft ones as features.

English and Spanish word lists; anything else falls back to the digit and symbol checks,
which need no language.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

from deja.semantic.antonyms import ANTONYM_FORMS, ANTONYMS

# A number with its sign and decimals; a word, with the "++"/"#" of C++, C#, F#; any other
# single non-space character (operators, %, @, $, €, ^ …).
_TOKEN = re.compile(r"(?<![\w.])[-+]?\d+(?:[.,]\d+)*|\w+(?:\+\+|#|\+)?|[^\w\s]")
#: Sentence punctuation: it never changes what a question asks.
_SOFT = frozenset("?!.,;:¿¡\"'`´‘’“”«»()[]{}…")
_DASHES = str.maketrans({"−": "-", "–": "-", "—": "-", "‐": "-"})


def tokens(text: str) -> list[str]:
    """Case-folded tokens of ``text`` with symbols, digits and signs kept as words."""
    flat = unicodedata.normalize("NFKC", text).translate(_DASHES).casefold()
    return [t for t in _TOKEN.findall(flat) if t not in _SOFT]


# --- lexicons ---------------------------------------------------------------------------------

_NUMBER_WORDS = {
    w: str(i)
    for i, ws in enumerate(
        [
            ("zero", "cero"),
            ("one", "uno", "una", "un"),
            ("two", "dos"),
            ("three", "tres"),
            ("four", "cuatro"),
            ("five", "cinco"),
            ("six", "seis"),
            ("seven", "siete"),
            ("eight", "ocho"),
            ("nine", "nueve"),
            ("ten", "diez"),
            ("eleven", "once"),
            ("twelve", "doce"),
        ]
    )
    for w in ws
}
# "one"/"un"/"una" are mostly articles or pronouns ("which one", "un libro"): not numbers.
for _w in ("one", "uno", "una", "un", "once"):
    _NUMBER_WORDS.pop(_w)
_NUMBER_WORDS.update({"dozen": "12", "docena": "12", "hundred": "100", "thousand": "1000"})

_UNIT_GROUPS: dict[str, tuple[str, ...]] = {
    "km": (
        "km",
        "kms",
        "kilometer",
        "kilometers",
        "kilometre",
        "kilometres",
        "kilómetro",
        "kilómetros",
    ),
    "mi": ("mile", "miles", "milla", "millas"),
    "m": ("meter", "meters", "metre", "metres", "metro", "metros"),
    "ft": ("ft", "foot", "feet", "pie", "pies"),
    "in": ("inch", "inches", "pulgada", "pulgadas"),
    "cm": ("cm", "centimeter", "centimeters", "centímetro", "centímetros"),
    "mm": ("mm", "millimeter", "millimeters", "milímetro", "milímetros"),
    "kg": ("kg", "kgs", "kilo", "kilos", "kilogram", "kilograms", "kilogramo", "kilogramos"),
    "g": ("gram", "grams", "gramo", "gramos"),
    "lb": ("lb", "lbs", "pound", "pounds", "libra", "libras"),
    "c": ("celsius", "centigrade", "centígrados"),
    "f": ("fahrenheit",),
    "gb": ("gb", "gigabyte", "gigabytes"),
    "mb": ("mb", "megabyte", "megabytes"),
    "tb": ("tb", "terabyte", "terabytes"),
    "l": ("liter", "liters", "litre", "litres", "litro", "litros"),
    "gal": ("gallon", "gallons", "galón", "galones"),
    "s": ("second", "seconds", "segundo", "segundos", "sec", "secs"),
    "min": ("minute", "minutes", "minuto", "minutos", "mins"),
    "h": ("hour", "hours", "hora", "horas", "hr", "hrs"),
    "day": ("day", "days", "día", "días"),
    "week": ("week", "weeks", "semana", "semanas"),
    "month": ("month", "months", "mes", "meses"),
    "year": ("year", "years", "año", "años"),
    "usd": ("$", "usd", "dollar", "dollars", "dólar", "dólares"),
    "eur": ("€", "eur", "euro", "euros"),
    "gbp": ("£", "gbp"),
    "inr": ("₹", "inr", "rupee", "rupees", "rs"),
    "pct": ("%", "percent", "percentage", "por", "ciento"),
    "mph": ("mph",),
    "kmh": ("kmh", "kph"),
    "cal": ("calorie", "calories", "caloría", "calorías", "kcal"),
}
_UNITS = {w: u for u, ws in _UNIT_GROUPS.items() for w in ws}
# Words that are units only next to a number ("a second opinion", "por favor", "in time").
_UNIT_NEEDS_NUMBER = frozenset(
    {
        "second",
        "segundo",
        "por",
        "ciento",
        "in",
        "m",
        "s",
        "g",
        "l",
        "c",
        "f",
        "min",
        "h",
        "pie",
        "pies",
        "day",
        "week",
        "month",
        "year",
        "día",
        "semana",
        "mes",
        "año",
        "hora",
    }
)
_ORDINALS = {
    **dict.fromkeys(("first", "1st", "primero", "primera", "primer"), "1"),
    **dict.fromkeys(("second", "2nd", "segunda"), "2"),
    **dict.fromkeys(("third", "3rd", "tercero", "tercera", "tercer"), "3"),
    **dict.fromkeys(("fourth", "4th", "cuarto", "cuarta"), "4"),
    **dict.fromkeys(("fifth", "5th", "quinto", "quinta"), "5"),
    **dict.fromkeys(("last", "último", "última", "final"), "last"),
    **dict.fromkeys(("next", "próximo", "próxima", "siguiente"), "next"),
    **dict.fromkeys(("previous", "anterior"), "previous"),
}
#: Words whose suffix symbol names another thing (three languages: C, C++, C#).
_CODE_WORDS = frozenset({"c", "c++", "c#", "f#", "j#", "g++", "x++", "a+", "b+"})
#: Operators standing alone ("x == y", "a ^ b"), and symbols that change a question anywhere.
_OPERATOR = re.compile(r"(?<!\S)(?:[-+*/^=<>!&|~%]+|\*\*)(?!\S)")
_ANYWHERE = frozenset("%@#$€£^=<>~&|")
_NEGATIONS = frozenset(
    {
        "not",
        "no",
        "never",
        "without",
        "none",
        "nothing",
        "nobody",
        "nunca",
        "sin",
        "ni",
        "nada",
        "nadie",
        "jamás",
        "neither",
        "nor",
    }
)
_NEGATED_AUX = re.compile(r"n't\b|n’t\b|\bcannot\b", re.I)

_ANT = {x: y for a, b in (*ANTONYMS, *ANTONYM_FORMS) for x, y in ((a, b), (b, a))}
# Words that make word order meaningless ("difference between X and Y" = "… Y and X").
_SYMMETRIC = frozenset(
    {
        "between",
        "entre",
        "and",
        "or",
        "y",
        "o",
        "vs",
        "versus",
        "compare",
        "comparison",
        "difference",
        "diferencia",
        "comparar",
        "both",
    }
)
_STOP_WORDS = (
    "a an the is are was were be do does did i my me you your it its of in on at for to and or "
    "how what which who why when where can could should would will with this that there as by "
    "from about into than if so we our they their he she his her el la los las un una de del "
    "en y o que es son por para con se mi tu cómo qué cuál cuándo dónde hay lo al"
)
_STOP = frozenset(_STOP_WORDS.split())


#: The mismatch kinds a decision may veto on, in bit order of :meth:`Signals.mask`.
HARD_KINDS = ("number", "unit", "ordinal", "symbol", "entity", "antonym", "reordered")


def kinds_mask(kinds: tuple[str, ...] | list[str]) -> int:
    """The bit mask of ``kinds`` (names from :data:`HARD_KINDS`)."""
    return sum(1 << HARD_KINDS.index(k) for k in kinds)


@dataclass(frozen=True, slots=True)
class Signals:
    """What differs between two questions beyond wording. ``hard`` lists the vetoing kinds."""

    number: bool = False
    unit: bool = False
    ordinal: bool = False
    symbol: bool = False
    entity: bool = False
    antonym: bool = False
    reordered: bool = False
    negation: bool = False
    extra_entity: bool = False  # one side names something the other does not (narrower)

    @property
    def hard(self) -> tuple[str, ...]:
        return tuple(k for k in HARD_KINDS if getattr(self, k))

    @property
    def mask(self) -> int:
        """The hard kinds present, as bits (see :data:`HARD_KINDS`)."""
        return kinds_mask(self.hard)

    def features(self) -> tuple[float, float]:
        """The soft signals the combiner weighs: (negation, extra_entity)."""
        return (float(self.negation), float(self.extra_entity))


def _numbers(toks: list[str]) -> Counter[str]:
    out: Counter[str] = Counter()
    for t in toks:
        if any(c.isdigit() for c in t):  # "15", "-5", "3.5", "v2", "ios14", "5km"
            out[t.lstrip("+").replace(",", ".")] += 1
        elif t in _NUMBER_WORDS:
            out[_NUMBER_WORDS[t]] += 1
    return out


def _units(toks: list[str]) -> set[str]:
    found: set[str] = set()
    for i, t in enumerate(toks):
        unit = _UNITS.get(t)
        if unit is None:
            # "5km", "3gb": a unit glued to its number is split off by the tokenizer only
            # sometimes ("5km" is one \w+ token): look at letters after digits
            m = re.fullmatch(r"\d+(?:[.,]\d+)?([a-z]{1,3})", t)
            unit = _UNITS.get(m.group(1)) if m else None
            if unit is not None:
                found.add(unit)
            continue
        if t in _UNIT_NEEDS_NUMBER:
            prev = toks[i - 1] if i else ""
            if not (prev[:1].isdigit() or prev in _NUMBER_WORDS):
                continue
        found.add(unit)
    return found


def _entities(text: str) -> set[str]:
    """Capitalised words not at a sentence start, acronyms and code-like words (casefolded)."""
    flat = unicodedata.normalize("NFKC", text)
    out: set[str] = set()
    for m in re.finditer(r"[\w][\w+#.'-]*", flat):
        word = m.group(0).rstrip(".'-")
        before = flat[: m.start()].rstrip(" \"'“‘(")
        at_start = not before or before[-1] in ".?!¿¡:"
        cap = word[:1].isupper() and word.lower() not in _STOP and word != "I"
        code = any(c in word for c in "+#") or (word.isupper() and len(word) > 1)
        if (cap and not at_start) or code:
            out.add(word.casefold())
    return out


def _symbols(text: str, toks: set[str]) -> set[str]:
    flat = unicodedata.normalize("NFKC", text)
    found = set(_OPERATOR.findall(flat)) | (set(flat) & _ANYWHERE)
    return found | (toks & _CODE_WORDS)


def _negations(text: str, toks: list[str]) -> int:
    return sum(t in _NEGATIONS for t in toks) + len(_NEGATED_AUX.findall(text))


_NEG_PREFIXES = ("un", "dis", "des", "non", "in", "im")


def _opposed(sa: set[str], sb: set[str]) -> bool:
    """A word of ``sa`` whose opposite (from the list, or the word with a negating prefix:
    lock/unlock, activo/desactivo) is in ``sb`` only."""
    for t in sa - sb:
        opposite = _ANT.get(t)
        if opposite is not None and opposite in sb and opposite not in sa:
            return True
        if len(t) >= 4 and any(p + t in sb and p + t not in sa for p in _NEG_PREFIXES):
            return True
    return False


def compare(query: str, cached: str) -> Signals:
    """The mismatch signals between ``query`` and ``cached`` (symmetric)."""
    qa, qb = tokens(query), tokens(cached)
    sa, sb = set(qa), set(qb)
    number = _numbers(qa) != _numbers(qb)
    unit = _units(qa) != _units(qb)
    ordinal = {_ORDINALS[t] for t in qa if t in _ORDINALS} != {
        _ORDINALS[t] for t in qb if t in _ORDINALS
    }
    symbol = _symbols(query, sa) != _symbols(cached, sb)
    ea, eb = _entities(query), _entities(cached)
    only_a = {e for e in ea - eb if e not in sb}
    only_b = {e for e in eb - ea if e not in sa}
    entity = bool(only_a) and bool(only_b)
    antonym = _opposed(sa, sb) or _opposed(sb, sa)
    content_a = [t for t in qa if t not in _STOP]
    content_b = [t for t in qb if t not in _STOP]
    reordered = Counter(qa) == Counter(qb) and content_a != content_b and not (sa & _SYMMETRIC)
    negation = (_negations(query, qa) > 0) != (_negations(cached, qb) > 0)
    return Signals(
        number=number,
        unit=unit,
        ordinal=ordinal,
        symbol=symbol,
        entity=entity,
        antonym=antonym,
        reordered=reordered,
        negation=negation,
        extra_entity=bool(only_a) != bool(only_b),
    )
