"""One English noun swapped for a sister of its WordNet class is a meaning change; synonyms,
a word's own class, forms of one word and wider rewordings are not (deja.semantic.neighbours,
the ``neighbour`` kind of deja.semantic.mismatch)."""

from __future__ import annotations

import json

import pytest

from deja.files import file_sha256
from deja.semantic.mismatch import compare
from deja.semantic.neighbours import IRREGULAR, NOUNS, TABLE_FILE, base_form, load_nouns, swapped


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Can dogs eat grapes?", "Can cats eat grapes?"),
        ("Is coffee bad for kids?", "Is tea bad for kids?"),
        ("Where is the best hotel in Lisbon?", "Where is the best restaurant in Lisbon?"),
        ("How do I cook rice in a pot?", "How do I cook rice in a pan?"),
        ("What is the best way to learn piano?", "What is the best way to learn guitar?"),
        ("How many calories are in an apple?", "How many calories are in a banana?"),
        (
            "How do you draw a Bohr diagram for calcium?",
            "How do you draw a Bohr diagram for sodium?",
        ),
        ("best hotels in Austin", "best restaurants in Austin"),  # plurals, no question mark
    ],
)
def test_a_noun_swapped_for_a_neighbour(a: str, b: str) -> None:
    assert "neighbour" in compare(a, b).hard
    assert "neighbour" in compare(b, a).hard  # symmetric


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # synonyms: the two words share a sense
        ("What is the best photo of you?", "What is the best picture of you?"),
        ("How do I get my car insurance back?", "How do I get my automobile insurance back?"),
        ("Where can I buy a cheap film camera?", "Where can I buy a cheap movie camera?"),
        # one word is the other's class, or a form of it
        ("Can I put a mug in the microwave?", "Can I put a mug in the appliance?"),
        ("How can I get girls to like me?", "How can I get my girlfriend to like me?"),
        ("Why are bowls round?", "Why is a bowl round?"),
        # more than one word each side changed: left to the model
        ("Is coffee bad for kids?", "Is green tea bad for young kids?"),
        ("Can dogs eat grapes?", "Can cats drink milk?"),
        # a verb, not a noun: "work" and "use" are mostly verbs
        ("Does this app work on an iPad?", "Can I use this app on an iPad?"),
        # Spanish: not in the table
        ("¿Puedo ir en tren?", "¿Puedo ir en avión?"),
    ],
)
def test_no_neighbour_swap(a: str, b: str) -> None:
    assert "neighbour" not in compare(a, b).hard


def test_base_forms() -> None:
    assert base_form("bowls") == "bowl"
    assert base_form("cities") == "city"
    assert base_form("boxes") == "box"
    assert base_form("knives") == "knife"  # WordNet's irregular plurals
    assert base_form("glass") == "glass"  # listed as written: no singular sought
    assert base_form("zzzs") == "zzzs"  # unknown stays as written


def test_swapped_needs_one_listed_noun_each_side() -> None:
    assert swapped({"dog", "food"}, {"cat", "food"})
    assert not swapped({"dog"}, {"dog"})
    assert not swapped({"dog", "zzz"}, {"cat", "qqq"})
    assert not swapped({"qqq"}, {"zzz"})  # not nouns of the table


def test_the_shipped_table() -> None:
    sums = (TABLE_FILE.parent / "SHA256SUMS").read_text(encoding="utf-8").split()
    assert sums == [file_sha256(TABLE_FILE), TABLE_FILE.name]
    table = json.loads(TABLE_FILE.read_text(encoding="utf-8"))
    assert table["source"].startswith("WordNet 3.0")
    assert 5_000 <= len(table["words"]) == len(NOUNS) <= 50_000
    # every word is lower-case letters; every set is non-empty where the check needs it
    assert all(w.isalpha() and w == w.lower() for w in NOUNS)
    assert all(n.senses and n.classes for n in NOUNS.values())
    assert all(singular in NOUNS for singular in IRREGULAR.values())
    assert load_nouns(TABLE_FILE) == (NOUNS, IRREGULAR)
