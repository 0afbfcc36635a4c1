"""Synonym paraphrases for the verifier's training mix (``training.verifier.synonyms``): one
word of a group replaced by another of the same group, the held-out groups never used for
training rows, and Spanish rows built from two forms of one intent."""

from __future__ import annotations

import random
import re

from training.verifier.synonyms import (
    HELD_EN,
    HELD_ES,
    TRAIN_EN,
    TRAIN_ES,
    slot_rows,
    synonym,
    synonym_rows,
)
from training.verifier.templates import spanish_slots


def _words(groups: list[list[str]]) -> set[str]:
    return {w.lower() for g in groups for w in g}


def test_held_out_groups_share_no_word_with_training_groups() -> None:
    assert HELD_EN and HELD_ES
    assert not _words(HELD_EN) & _words(TRAIN_EN)
    assert not _words(HELD_ES) & _words(TRAIN_ES)


def test_a_synonym_swap_changes_one_group_word_and_keeps_the_rest() -> None:
    rng = random.Random(0)
    groups = [["buy", "purchase"]]
    seen = set()
    for _ in range(40):
        out = synonym("Where can I buy a used bike in Berlin?", rng, groups)
        assert out is not None
        assert "purchase" in out.lower()
        assert "used bike in Berlin" in out
        seen.add(out)
    # half the time the question form is rewritten as well
    assert len(seen) > 1


def test_no_group_word_means_no_row() -> None:
    assert synonym("What is the capital of Peru?", random.Random(0), [["buy", "purchase"]]) is None


def test_training_rows_never_use_a_held_out_synonym() -> None:
    held = _words(HELD_EN) - _words(TRAIN_EN)
    questions = [
        "How long does it take to learn to drive?",
        "Which phone should I buy for my kids?",
        "What is the best way to make money online?",
        "How do I fix a mistake in my tax return?",
        "Where can I find cheap flights to Spain?",
    ]
    rows = synonym_rows(questions, random.Random(1), 50, TRAIN_EN, "synonym_en")
    assert rows
    for pair, kind in rows:
        assert kind == "synonym_en" and pair.duplicate
        before = {w for w in held if re.search(rf"\b{re.escape(w)}\b", pair.a.lower())}
        after = {w for w in held if re.search(rf"\b{re.escape(w)}\b", pair.b.lower())}
        # a held-out word may stand in the question already, but no row swaps one in or out
        assert before == after
    assert len({(p.a, p.b) for p, _ in rows}) == len(rows)


def test_spanish_rows_pair_two_forms_of_one_intent_with_a_synonym() -> None:
    rows = slot_rows(spanish_slots(), random.Random(2), 200, TRAIN_ES, "synonym_es")
    assert len(rows) == 200
    assert len({(p.a, p.b) for p, _ in rows}) == 200
    swapped = 0
    for pair, _ in rows:
        a, b = pair.a.lower(), pair.b.lower()
        assert pair.duplicate and a != b
        for group in TRAIN_ES:
            in_a = {w for w in group if w in a}
            in_b = {w for w in group if w in b}
            swapped += bool(in_a and in_b and in_a != in_b)
    assert swapped >= 150  # nearly every row carries a different member of a group on each side
