"""Surface checks between a query and a cached question: the words a cross-encoder can miss.

A cached answer to "mastering C++?" is wrong for "mastering C?", and one for "5 km" wrong for
"5 miles", however close the two questions read. These checks look only at the two texts:

- :func:`tokens`: symbols, digits and units are words ("c", "c++", "c#", "5", "-5", "15",
  "%" are all different tokens); only sentence punctuation (``?!.,;:¿¡`` and quotes) and case
  are dropped. :func:`deja.semantic.verifier.same_words` compares these.
- :func:`compare` → :class:`Signals`: number, unit, ordinal, symbol and named-entity
  mismatches, antonym pairs, negation differences and reorderings (the same words in another
  order: "from X to Y" / "from Y to X"; or the same words with the pronouns' roles swapped:
  "Why does my boss email me?" / "Why do I email my boss?"); and one English noun swapped for
  a sister of its WordNet class ("microwave" / "oven": :mod:`deja.semantic.neighbours`). The
  decision (:mod:`deja.semantic.cutoffs`) vetoes a candidate with a *hard* mismatch and uses
  the soft ones as features.

English and Spanish word lists; anything else falls back to the digit and symbol checks,
which need no language.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

from deja.semantic import lexicon as lex
from deja.semantic import neighbours
from deja.semantic.antonyms import ANTONYM_FORMS, ANTONYMS, VETO_ONLY

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


#: Operators standing alone ("x == y", "a ^ b"), and symbols that change a question anywhere.
_OPERATOR = re.compile(r"(?<!\S)(?:[-+*/^=<>!&|~%]+|\*\*)(?!\S)")
_ANYWHERE = frozenset("%@#$€£^=<>~&|")
_NEGATED_AUX = re.compile(r"n't\b|n’t\b|\bcannot\b", re.I)


def _opposites(pairs: tuple[tuple[str, str], ...]) -> dict[str, frozenset[str]]:
    """word -> its opposites; a word may have several ("light" faces "heavy" and "dark")."""
    out: dict[str, set[str]] = {}
    for a, b in pairs:
        out.setdefault(a, set()).add(b)
        out.setdefault(b, set()).add(a)
    return {word: frozenset(opposite) for word, opposite in out.items()}


_ANT = _opposites((*ANTONYMS, *ANTONYM_FORMS, *VETO_ONLY))


#: The mismatch kinds a decision may veto on, in bit order of :meth:`Signals.mask`.
HARD_KINDS = (
    "number",
    "unit",
    "ordinal",
    "symbol",
    "entity",
    "antonym",
    "reordered",
    "disjoint",
    "neighbour",
)


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
    disjoint: bool = False  # no content word in common
    neighbour: bool = False  # one noun swapped for a sister of its class (microwave / oven)
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


def _numbers(toks: list[str]) -> tuple[Counter[str], Counter[str]]:
    """The numbers named (digits and number words), and the soft ones ("both", "double")."""
    out: Counter[str] = Counter()
    soft: Counter[str] = Counter()
    for t in toks:
        if any(c.isdigit() for c in t):  # "15", "-5", "3.5", "v2", "ios14", "5km"
            out[t.lstrip("+").replace(",", ".")] += 1
        elif t in lex.NUMBER_WORDS:
            out[lex.NUMBER_WORDS[t]] += 1
        elif t in lex.SOFT_NUMBER_WORDS:
            soft[lex.SOFT_NUMBER_WORDS[t]] += 1
    return out, soft


def _number_mismatch(qa: list[str], qb: list[str]) -> bool:
    """Other numbers, counting the soft words ("doble cara" / "dos caras" match); soft words
    alone differ only against soft words ("once" / "twice", not "both X" / "X")."""
    (na, sa), (nb, sb) = _numbers(qa), _numbers(qb)
    return na + sa != nb + sb and (na != nb or bool(sa and sb))


def _units(toks: list[str]) -> tuple[set[str], bool]:
    """The units named, and whether one of them measures a number ("5 km", "5km")."""
    found: set[str] = set()
    measured = False
    for i, t in enumerate(toks):
        unit = lex.UNITS.get(t)
        if unit is None:
            # "5km", "3gb": a unit glued to its number is split off by the tokenizer only
            # sometimes ("5km" is one \w+ token): look at letters after digits
            m = re.fullmatch(r"\d+(?:[.,]\d+)?([a-z]{1,3})", t)
            unit = lex.UNITS.get(m.group(1)) if m else None
            if unit is not None:
                found.add(unit)
                measured = True
            continue
        prev = toks[i - 1] if i else ""
        after_number = prev[:1].isdigit() or prev in lex.NUMBER_WORDS
        if t in lex.UNIT_NEEDS_NUMBER and not after_number:
            continue
        found.add(unit)
        measured = measured or after_number
    return found, measured


def _unit_mismatch(qa: list[str], qb: list[str]) -> bool:
    """Two different units, or a measured quantity on one side only. A bare unit word against
    none ("how long" / "how many minutes") is wording, not another question."""
    (ua, ma), (ub, mb) = _units(qa), _units(qb)
    if ua == ub:
        return False
    if ua and ub:
        return True
    return ma or mb


def _ordinals(toks: list[str]) -> set[str]:
    out = set()
    for i, t in enumerate(toks):
        rank = lex.ORDINALS.get(t)
        if rank is None:
            continue
        prev, nxt = toks[i - 1] if i else "", toks[i + 1] if i + 1 < len(toks) else ""
        if prev in lex.NOT_ORDINAL_AFTER.get(t, ()) or nxt in lex.NOT_ORDINAL_BEFORE.get(t, ()):
            continue
        out.add(rank)
    return out


def _entities(text: str) -> set[str]:
    """Capitalised words not at a sentence start, acronyms and code-like words (casefolded)."""
    flat = unicodedata.normalize("NFKC", text)
    out: set[str] = set()
    for m in re.finditer(r"[\w][\w+#.'-]*", flat):
        word = m.group(0).rstrip(".'-")
        before = flat[: m.start()].rstrip(" \"'“‘(")
        at_start = not before or before[-1] in ".?!¿¡:"
        if len(word) > 2 and word.endswith("s") and word[:-1].isupper():
            word = word[:-1]  # "PDFs", "APIs": the acronym's plural
        cap = word[:1].isupper() and word.lower() not in lex.STOP and word != "I"
        code = any(c in word for c in "+#") or (word.isupper() and len(word) > 1)
        if (cap and not at_start) or code:
            out.add(word.casefold())
    return out


def _class_swapped(sa: set[str], sb: set[str]) -> bool:
    """A name of a closed class (:data:`~deja.semantic.lexicon.NAME_CLASSES`) on each side,
    of the same class, that the other side lacks ("on sunday" / "on monday")."""
    only_a = {c for w in sa - sb if (c := lex.NAME_CLASS.get(w)) is not None}
    return bool(only_a) and any(lex.NAME_CLASS.get(w) in only_a for w in sb - sa)


def _symbols(text: str, toks: set[str]) -> set[str]:
    flat = unicodedata.normalize("NFKC", text)
    found = set(_OPERATOR.findall(flat)) | (set(flat) & _ANYWHERE)
    return found | (toks & lex.CODE_WORDS)


def _negations(text: str, toks: list[str]) -> int:
    return sum(t in lex.NEGATIONS for t in toks) + len(_NEGATED_AUX.findall(text))


def _stem(t: str) -> str:
    """A crude stem that joins number and gender forms ("caro"/"cara", "cats"/"cat"), so that a
    swap which changes an adjective's agreement ("¿Es el oro más caro que la plata?" / "¿Es la
    plata más cara que el oro?") still reads as the same words reordered."""
    if len(t) > 3 and t.isalpha():
        t = t[:-1] if t.endswith("s") else t
        t = t[:-1] if len(t) > 3 and t[-1] in "ao" else t
    return t


#: (way, language, the next word but articles) for each preposition of direction in a text.
Directions = set[tuple[str, str, str]]


def _directions(toks: list[str]) -> Directions:
    """The text's :data:`Directions`."""
    out: Directions = set()
    for i, t in enumerate(toks):
        if (direction := lex.DIRECTIONS.get(t)) is None:
            continue
        rest = [w for w in toks[i + 1 : i + 3] if w not in lex.ARTICLES]
        if rest and rest[0] not in lex.NOT_A_PLACE:
            out.add((*direction, rest[0]))
    return out


def _content(toks: list[str], drop: frozenset[str] = frozenset()) -> list[str]:
    """The stems of the words that are not stop words (nor in ``drop``), in order."""
    return [s for t in toks if t not in lex.STOP and (s := _stem(t)) not in drop]


def _words(toks: set[str]) -> set[str]:
    """The content words as written (no stems): the nouns :mod:`~deja.semantic.neighbours`
    looks up."""
    return {t for t in toks if t.isalpha() and t not in lex.STOP}


def _disjoint(qa: list[str], qb: list[str]) -> bool:
    """No content word in common: stop words aside, words compared by their first four letters
    (so "configure" meets "configuring", "dormir" meets "dormirme"). Two such questions are
    about different things, whatever the model says. The embedder puts unrelated Spanish
    questions close together (cosine 0.6 or more for 52 of 598 random pairs of the hand-written
    sets, against 5 of 596 English ones), and the verifier called a few of them paraphrases
    ("¿Cómo puedo dejar de posponer las cosas?" / "¿Qué debo comer antes de correr?", logit
    +6.1); a cached answer to one is no answer to the other."""
    ka = {s[:4] for s in _content(qa)}
    kb = {s[:4] for s in _content(qb)}
    return bool(ka) and bool(kb) and not ka & kb


def _reordered(qa: list[str], qb: list[str], sa: set[str], da: Directions, db: Directions) -> bool:
    """The same words (up to articles and agreement) in another order, outside a symmetric
    "between X and Y"."""
    if sa & lex.SYMMETRIC:
        return False
    if Counter(qa) != Counter(qb):
        sta = [_stem(t) for t in qa if t not in lex.ARTICLES]
        stb = [_stem(t) for t in qb if t not in lex.ARTICLES]
        if Counter(sta) != Counter(stb):
            return False
    # an origin and a destination that keep their prepositions may move ("from London to
    # Paris" / "to Paris from London"); one preposition before two words marks no roles ("a
    # landlord sue a tenant": the article "a" reads as Spanish "a")
    two = len(da) == 2 and len({way for way, _, _ in da}) == 2 and da == db
    kept = frozenset(_stem(place) for _, _, place in da) if two else frozenset()
    return _content(qa, kept) != _content(qb, kept)


def _roles_swapped(qa: list[str], qb: list[str], sa: set[str], sb: set[str]) -> bool:
    """The same words up to pronoun case, do-support and agreement, with a pronoun case that
    one side lacks: who does what to whom changed ("Why does my boss email me?" / "Why do I
    email my boss?", "Does she love him?" / "Does he love her?"). English only."""
    # the cheap tests first, where most pairs stop: the same length, a pronoun one side lacks
    if len(qa) != len(qb) or not (sa ^ sb) & lex.CASED_PRONOUNS:
        return False
    if (sa | sb) & lex.SYMMETRIC:  # "me and my friend" / "my friend and I"
        return False
    neutral_a = Counter(_stem(lex.CASE_NEUTRAL.get(t, t)) for t in qa if t not in lex.ARTICLES)
    neutral_b = Counter(_stem(lex.CASE_NEUTRAL.get(t, t)) for t in qb if t not in lex.ARTICLES)
    return neutral_a == neutral_b


_NEG_PREFIXES = ("un", "dis", "des", "non", "in", "im")


def _absent(toks: list[str]) -> set[str]:
    """The token set, with "with no" read as "without" ("a business with no money" / "without
    any money" is one question)."""
    out = set(toks)
    if any(a == "with" and b == "no" for a, b in itertools.pairwise(toks)):
        out.add("without")
    return out


def _opposed(sa: set[str], sb: set[str]) -> bool:
    """A word of ``sa`` whose opposite (from the list, or the word with a negating prefix:
    lock/unlock, activo/desactivo) is in ``sb`` only."""
    for t in sa - sb:
        if (_ANT.get(t, frozenset()) & sb) - sa:
            return True
        if len(t) >= 4 and any(p + t in sb and p + t not in sa for p in _NEG_PREFIXES):
            return True
    return False


_FLIP = {"to": "from", "from": "to"}


def _direction_flipped(da: Directions, db: Directions) -> bool:
    """The same place reached on one side and left on the other ("to Rome" / "from Rome")."""
    if not da or not db:
        return False
    only_a, only_b = da - db, db - da
    return any((_FLIP[way], lang, word) in only_b for way, lang, word in only_a)


def _asked(toks: list[str]) -> str | None:
    """The kind of answer the first word asks for (place, time, person, reason), if any."""
    if not toks:
        return None
    if toks[0] == "por" and len(toks) > 1 and toks[1] in ("qué", "que"):
        return "reason"
    return lex.QUESTION_WORDS.get(toks[0])


_QUESTION_STEMS = frozenset(_stem(w) for w in lex.QUESTION_WORDS)


def _asks_another(qa: list[str], qb: list[str]) -> bool:
    """The same content words under question words that ask for another kind of answer
    ("Where was she born?" / "When was she born?", "¿Dónde …?" / "¿Cuándo …?")."""
    ka, kb = _asked(qa), _asked(qb)
    if ka is None or kb is None or ka == kb:
        return False
    return Counter(_content(qa, _QUESTION_STEMS)) == Counter(_content(qb, _QUESTION_STEMS))


def compare(query: str, cached: str) -> Signals:
    """The mismatch signals between ``query`` and ``cached`` (symmetric)."""
    qa, qb = tokens(query), tokens(cached)
    sa, sb = set(qa), set(qb)
    number = _number_mismatch(qa, qb)
    unit = _unit_mismatch(qa, qb)
    ordinal = _ordinals(qa) != _ordinals(qb)
    symbol = _symbols(query, sa) != _symbols(cached, sb)
    ea, eb = _entities(query), _entities(cached)
    only_a = {e for e in ea - eb if e not in sb}
    only_b = {e for e in eb - ea if e not in sa}
    entity = (bool(only_a) and bool(only_b)) or _class_swapped(sa, sb)
    pa, pb = _absent(qa), _absent(qb)
    da, db = _directions(qa), _directions(qb)
    antonym = (
        _opposed(pa, pb) or _opposed(pb, pa) or _direction_flipped(da, db) or _asks_another(qa, qb)
    )
    reordered = _reordered(qa, qb, sa, da, db) or _roles_swapped(qa, qb, sa, sb)
    negation = (_negations(query, qa) > 0) != (_negations(cached, qb) > 0)
    return Signals(
        number=number,
        unit=unit,
        ordinal=ordinal,
        symbol=symbol,
        entity=entity,
        antonym=antonym,
        reordered=reordered,
        disjoint=_disjoint(qa, qb),
        neighbour=neighbours.swapped(_words(sa), _words(sb)),
        negation=negation,
        extra_entity=bool(only_a) != bool(only_b),
    )
