"""Symbols, digits and units are words; number/unit/ordinal/entity/antonym/order mismatches
are signals (deja.semantic.mismatch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deja.semantic.cutoffs import parse_table
from deja.semantic.mismatch import HARD_KINDS, compare, kinds_mask, tokens
from deja.semantic.verifier import same_words


def test_tokens_keep_symbols_digits_and_signs() -> None:
    assert tokens("Learning C++ vs C#?") == ["learning", "c++", "vs", "c#"]
    assert tokens("Is -5 < 15%?") == ["is", "-5", "<", "15", "%"]
    assert tokens("¿Qué es v2?") == ["qué", "es", "v2"]
    assert tokens("x − 3") == tokens("x - 3")  # a Unicode minus is a minus


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Which book teaches C?", "Which book teaches C++?"),
        ("Which book teaches C#?", "Which book teaches C++?"),
        ("What is 5 squared?", "What is -5 squared?"),
        ("Is 15% a good rate?", "Is 15 a good rate?"),
        ("What changed in v2?", "What changed in v3?"),
        ("when is a != b", "when is a == b"),
        ("What does x ^ 2 mean?", "What does x * 2 mean?"),
        ("How do I find my @ handle?", "How do I find my handle?"),
    ],
)
def test_same_words_keeps_symbols_apart(a: str, b: str) -> None:
    assert not same_words(a, b)


def test_same_words_still_ignores_case_and_sentence_punctuation() -> None:
    assert same_words("How do I reset my password?", "how do i reset  my password")
    assert same_words("¿Qué hora es?", "qué hora es")
    assert same_words("Is C++ hard?", "is c++ hard")
    assert not same_words("qué hora es", "que hora es")  # accents are letters


@pytest.mark.parametrize(
    ("a", "b", "kind"),
    [
        ("Which book teaches C?", "Which book teaches C++?", "symbol"),
        ("Is 15% of 80 a lot?", "Is 15 of 80 a lot?", "symbol"),
        ("How do I bake bread for 6 people?", "How do I bake bread for 16 people?", "number"),
        ("Temperature of -5 degrees", "Temperature of 5 degrees", "number"),
        ("What is new in Android 13?", "What is new in Android 14?", "number"),
        ("How far is 3 km on foot?", "How far is 3 miles on foot?", "unit"),
        ("¿Cuánto son 10 litros?", "¿Cuánto son 10 galones?", "unit"),
        ("Who won the third race?", "Who won the fifth race?", "ordinal"),
        ("¿Quién ganó la primera carrera?", "¿Quién ganó la segunda carrera?", "ordinal"),
        ("Best museums in Vienna?", "Best museums in Prague?", "entity"),
        # names of a closed class, however they are written
        ("is the museum open on sunday", "is the museum open on tuesday", "entity"),
        ("What shoes go with a red dress?", "What shoes go with a green dress?", "entity"),
        ("¿Qué corbata va con un traje negro?", "¿Qué corbata va con un traje gris?", "entity"),
        (
            "¿Qué tiempo hace en Sevilla en abril?",
            "¿Qué tiempo hace en Sevilla en agosto?",
            "entity",
        ),
        ("clases de francés para niños", "clases de alemán para niños", "entity"),
        ("How do I increase my score?", "How do I decrease my score?", "antonym"),
        ("¿Cómo activo el bluetooth?", "¿Cómo desactivo el bluetooth?", "antonym"),
        # the veto-only pairs (deja.semantic.antonyms.VETO_ONLY): adjectives, presence, persons
        ("¿Es bueno nadar después de comer?", "¿Es malo nadar después de comer?", "antonym"),
        ("Which snacks are good for my teeth?", "Which snacks are bad for my teeth?", "antonym"),
        ("Can I drink tea with honey?", "Can I drink tea without honey?", "antonym"),
        ("¿Puedo pagar con tarjeta?", "¿Puedo pagar sin tarjeta?", "antonym"),
        ("Gifts for a 10 year old boy", "Gifts for a 10 year old girl", "antonym"),
        # a word with two opposites: "light" faces "heavy" and "dark"
        ("How do I switch to light mode?", "How do I switch to dark mode?", "antonym"),
        ("Is a light blanket enough?", "Is a heavy blanket enough?", "antonym"),
        ("Trains from Porto to Faro?", "Trains from Faro to Porto?", "reordered"),
        (
            "¿Es el vino más caro que la cerveza?",
            "¿Es la cerveza más cara que el vino?",
            "reordered",
        ),
        ("How many km is it to Lyon?", "How many miles is it to Lyon?", "unit"),
        ("Is 20 minutes enough to boil rice?", "Is it enough to boil rice?", "unit"),
        ("Who was the last emperor of Rome?", "Who was the first emperor of Rome?", "ordinal"),
        ("¿Cuándo es la próxima clase?", "¿Cuándo es la clase?", "ordinal"),
        ("Can I print two pages per sheet?", "Can I print four pages per sheet?", "number"),
        ("Can I print double-sided?", "Can I print on four sides?", "number"),
        ("Should I water the lawn twice a week?", "Should I water the lawn once a week?", "number"),
        ("Is a double room enough for us?", "Is a single room enough for us?", "number"),
        # a direction flipped before the same place; ordinals past the fifth; Spanish verb forms
        ("Cheap flights to Rome in May?", "Cheap flights from Rome in May?", "antonym"),
        ("¿Hay vuelos baratos a Roma?", "¿Hay vuelos baratos desde Roma?", "antonym"),
        ("How do I move files into the cloud?", "How do I move files from the cloud?", "antonym"),
        ("Who won the tenth season?", "Who won the ninth season?", "ordinal"),
        ("¿Cuál es el segundo río más largo?", "¿Cuál es el río más largo?", "ordinal"),
        ("¿Cómo aumento mi puntuación?", "¿Cómo reduzco mi puntuación?", "antonym"),
        (
            "Is the train from Lyon to Nice faster than the bus?",
            "Is the bus from Lyon to Nice faster than the train?",
            "reordered",
        ),
        ("Can a landlord sue a tenant?", "Can a tenant sue a landlord?", "reordered"),
        # the same words under a question word that asks for another kind of answer
        ("Where did Shakespeare die?", "When did Shakespeare die?", "antonym"),
        ("¿Dónde se sirve el desayuno?", "¿Cuándo se sirve el desayuno?", "antonym"),
        ("¿Quién escribió el Quijote?", "¿Cuándo se escribió el Quijote?", "antonym"),
        ("¿Por qué cierra el museo?", "¿Cuándo cierra el museo?", "antonym"),
        # roles swapped: the same words with the pronouns in other cases
        ("Why does my sister text me so late?", "Why do I text my sister so late?", "reordered"),
        ("Does she trust him?", "Does he trust her?", "reordered"),
        ("Why am I ignored by them?", "Why are they ignored by me?", "reordered"),
    ],
)
def test_hard_mismatch_kinds(a: str, b: str, kind: str) -> None:
    assert kind in compare(a, b).hard
    assert kind in compare(b, a).hard  # symmetric


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("How do I lose 5 kg?", "How can I lose five kilos?"),
        ("What is the difference between tea and coffee?", "Difference between coffee and tea?"),
        ("Where is paris?", "Where is Paris?"),
        ("How do I learn Python fast?", "What is the quickest way to learn Python?"),
        ("¿Dónde está la estación?", "¿Dónde queda la estación?"),
        # a bare unit word against none is wording; a measured quantity is not
        ("How long should I steep green tea?", "How many minutes should green tea steep?"),
        ("¿Cuánto dura el viaje?", "¿Cuántas horas dura el viaje?"),
        # an acronym's plural, "last" the verb, "más próxima" (nearest), "double" = two
        ("Can I edit JPG files online?", "Can I edit JPGs online?"),
        ("How can I make my phone battery last longer?", "How do I save phone battery?"),
        ("¿Cuál es la farmacia más próxima?", "¿Dónde hay una farmacia cerca?"),
        ("How do I print double-sided?", "How do I print on two sides?"),
        ("How do I print double-sided?", "How can I print on both sides of the paper?"),
        ("Can both cats and dogs eat rice?", "Can cats and dogs eat rice?"),
        (
            "Once I reset the router, do I lose my settings?",
            "Do I lose my settings if I reset the router?",
        ),
        # the same roles with the clauses moved, or "me and X" / "X and I"
        ("If my cat scratches me, what do I do?", "What do I do if my cat scratches me?"),
        ("Can me and my partner share a plan?", "Can my partner and I share a plan?"),
        ("Why does he call me every day?", "Why does he call me daily?"),
        # places that keep their preposition may move; "each other" is no place; "un segundo"
        # is time; the English article "a" never faces "from"
        ("How do I get from London to Paris?", "How do I get to Paris from London?"),
        ("¿Cómo voy desde Madrid a Sevilla?", "¿Cómo voy a Sevilla desde Madrid?"),
        (
            "How do cats and dogs compare to each other?",
            "How do cats and dogs differ from each other?",
        ),
        ("Is it a good idea to buy a car?", "Should I buy a car from a dealer?"),
        ("¿Puedo cargar el móvil en un segundo?", "¿Puedo cargar el móvil rápido?"),
        ("¿Cuántos metros por segundo corre un guepardo?", "¿A qué velocidad corre un guepardo?"),
        # "what time" is "when", "how" and "what" ask for anything; a question word inside the
        # sentence is no question word
        ("When is breakfast served?", "What time is breakfast served?"),
        ("How do I get to the station?", "Where is the way to the station?"),
        ("Why do I feel lost? What should I do?", "What should I do when I feel lost?"),
        # a name of a closed class added, or on both sides, is no swap
        ("Is the museum open on Sunday?", "Is the museum open on Sunday morning?"),
        ("learn spanish and english", "how to learn english and spanish"),
        ("¿Cómo aprendo inglés?", "¿Cómo aprendo inglés rápido en julio?"),
        # two spellings of one colour
        ("Why is my hair turning grey?", "Why is my hair turning gray?"),
        # "with no" is "without"
        ("How do I start a business with no money?", "How do I start a business without money?"),
    ],
)
def test_paraphrases_have_no_hard_mismatch(a: str, b: str) -> None:
    assert compare(a, b).hard == ()


@pytest.mark.parametrize(
    ("a", "b", "disjoint"),
    [
        # no content word in common: about different things
        ("How do I renew my passport?", "What is the best pizza topping?", True),
        ("¿Cómo limpio el horno?", "¿Qué libro me recomiendas para el verano?", True),
        ("¿Cuándo es mejor vender una moto?", "¿Cuánto tarda en hervir la leche?", True),
        # one content word shared, compared by its first four letters, or a number shared
        ("How do I configure the agent?", "What is the process for configuring it?", False),
        ("¿Cómo puedo dormir mejor?", "¿Qué me ayuda a dormirme?", False),
        ("Top movies of 2016?", "Best films 2016?", False),
        ("How do I unclog a drain?", "What's the way to clear a blocked drain?", False),
        # the price: a paraphrase in other words altogether is refused too
        ("Where is the gym?", "Where can I go to exercise?", True),
    ],
)
def test_questions_without_a_content_word_in_common(a: str, b: str, disjoint: bool) -> None:
    assert ("disjoint" in compare(a, b).hard) is disjoint
    assert ("disjoint" in compare(b, a).hard) is disjoint


def test_soft_signals() -> None:
    assert compare("Why can I log in?", "Why can't I log in?").negation
    assert compare("How do I get a visa?", "How do I get a visa for Kenya?").extra_entity
    assert compare("How do I get a visa?", "How do I get a visa?").features() == (0.0, 0.0)


def test_table_vetoes_a_hard_mismatch_and_weighs_soft_signals() -> None:
    doc = {
        "k": 2,
        "cosine_floor": 0.6,
        "decision": "combined",
        "combined": {"w_logit": 1.0, "w_cosine": 0.0, "bias": 0.0, "w_negation": -2.0},
        "vetoes": ["symbol", "number"],
        "table": [{"precision": 0.9, "tau": 0.5, "hit_rate": 0.3, "interval": [0.88, 0.93]}],
    }
    table = parse_table(doc, Path("t.json"))
    assert table.rows[0].interval == (0.88, 0.93)
    symbol = compare("Which book teaches C?", "Which book teaches C++?")
    assert table.score(5.0, 0.99, symbol) == 0.0
    plain = compare("How do I learn Go?", "How can I learn Go?")
    assert table.score(0.0, 0.99, plain) == pytest.approx(0.5)
    negated = compare("Why can I log in?", "Why can't I log in?")
    assert table.score(0.0, 0.99, negated) < 0.5
    assert table.score(5.0, 0.99, None) > 0.99  # no signals given: the model decides


def test_unknown_veto_is_refused() -> None:
    from deja.errors import VerifierError

    doc = {"k": 1, "cosine_floor": 0.5, "vetoes": ["colour"], "table": [{"precision": 0.9}]}
    with pytest.raises(VerifierError, match="vetoes"):
        parse_table(doc, Path("t.json"))
    assert kinds_mask(HARD_KINDS) == (1 << len(HARD_KINDS)) - 1
