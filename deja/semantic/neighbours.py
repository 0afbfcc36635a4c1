"""Neighbour swaps: one English noun of a question swapped for another of its class.

"How long do I heat soup in the microwave?" and "… in the oven?" read alike to the embedder and
often to the verifier, and "How do I clean a fish bowl?" / "… a fish tank?", "best hotel in
Austin" / "best restaurant in Austin" are other questions with other answers. When the two
questions differ by exactly one noun on each side, and the two nouns are *neighbours* (sisters
under one WordNet class, with no sense in common and neither a class of the other), the swap is
a meaning change, like a weekday or a language swapped for another
(:func:`deja.semantic.mismatch.compare`, kind ``neighbour``).

The table (``deja/models/lexicon/noun_classes.json``) is derived from WordNet 3.0 by
``python -m training.lexicon.wordnet``, which says what each of its sets holds. It has English
nouns only; a Spanish swap ("tren" / "avión") is left to the model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

TABLE_FILE = Path(__file__).resolve().parents[1] / "models" / "lexicon" / "noun_classes.json"
#: Plural endings tried, longest first, when a word is not in the table as written.
_PLURALS = (("ies", "y"), ("es", ""), ("s", ""))
#: Two words that open alike this far are one word's forms ("girl" / "girlfriend",
#: "trade" / "trading"), never a swap.
_SAME_FAMILY = 4


@dataclass(frozen=True, slots=True)
class Noun:
    """One noun's WordNet synsets: its senses, its dominant senses' classes, every sense's
    direct hypernyms."""

    senses: frozenset[int]
    classes: frozenset[int]
    above: frozenset[int]

    def neighbour_of(self, other: Noun) -> bool:
        """Sisters under a class, with no sense in common and neither above the other."""
        if self.senses & other.senses or self.senses & other.above or other.senses & self.above:
            return False
        return bool(self.classes & other.classes)


def load_nouns(path: Path = TABLE_FILE) -> tuple[Mapping[str, Noun], Mapping[str, str]]:
    """The table at ``path``: word -> :class:`Noun`, and irregular plural -> its noun."""
    table = json.loads(path.read_text(encoding="utf-8"))
    nouns = {
        w: Noun(frozenset(senses), frozenset(classes), frozenset(above))
        for w, (senses, classes, above) in table["words"].items()
    }
    return nouns, dict(table["plurals"])


#: Read once, at import: immutable data like the word lists of :mod:`deja.semantic.lexicon`.
NOUNS, IRREGULAR = load_nouns()


def base_form(word: str) -> str:
    """``word`` as the table spells it: its singular where that is listed ("bowls" -> "bowl",
    though WordNet lists "bowls" the game too; "cities" -> "city"; "children" -> "child"),
    else as written."""
    if (irregular := IRREGULAR.get(word)) is not None:
        return irregular
    for ending, stem in _PLURALS:
        if word.endswith(ending) and (singular := word[: -len(ending)] + stem) in NOUNS:
            return singular
    return word


def swapped(content_a: set[str], content_b: set[str]) -> bool:
    """Whether the two sets of content words differ by one listed noun each, and the two
    are neighbours."""
    if not content_a - content_b or not content_b - content_a:
        return False  # base forms only ever remove differences
    a = {base_form(w) for w in content_a}
    b = {base_form(w) for w in content_b}
    diff_a, diff_b = a - b, b - a
    family_a = {w[:_SAME_FAMILY] for w in diff_a}
    family_b = {w[:_SAME_FAMILY] for w in diff_b}
    only_a = {x for x in diff_a if x[:_SAME_FAMILY] not in family_b}
    only_b = {y for y in diff_b if y[:_SAME_FAMILY] not in family_a}
    if len(only_a) != 1 or len(only_b) != 1:
        return False
    (x,), (y,) = only_a, only_b
    nx, ny = NOUNS.get(x), NOUNS.get(y)
    return nx is not None and ny is not None and nx.neighbour_of(ny)
