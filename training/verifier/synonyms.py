"""Synonym paraphrases: one word or phrase of a question replaced by a word of the same
meaning, sometimes with the question's form rewritten too (:func:`synonym_rows`; Spanish from
the templates' forms, :func:`slot_rows`), and contrasts: such a paraphrase with a family's
meaning change on top, labelled different (:func:`contrast_rows`).

Why: Quora's non-duplicates are full of near-identical questions with one content word
changed, and the negative families (:mod:`training.verifier.families`) add more of them, so a
model trained on those alone may learn that any changed word means another question ("buy"
against "purchase", "start" against "begin"). These rows are the word changes that keep the
meaning.

The groups were written for this module as general everyday synonyms, English and Spanish,
safe in most contexts. They were written after the hand-written generalisation set had been
read, so that set does not measure them cleanly; no pair of it was copied. Every fifth group
is held out of training (:data:`HELD_OUT`) and makes the ``val_synonym`` split, so that split
measures synonyms the model never saw.

Measured as a third training pass and not shipped (``docs/verifier-model-card.md``); the
rows are off by default in :mod:`training.verifier.prep`.
"""

from __future__ import annotations

import random

from training.verifier.common import Pair
from training.verifier.families import Rule, norm, rephrase, swap_from_groups

_EN: list[list[str]] = [
    ["buy", "purchase"],
    ["fix", "repair", "mend"],
    ["start", "begin"],
    ["get rid of", "eliminate"],
    ["delete", "erase"],
    ["choose", "select"],
    ["need", "require"],
    ["make money", "earn money"],
    ["find out", "discover"],
    ["talk to", "speak to", "speak with"],
    ["contact", "get in touch with"],
    ["increase", "boost"],
    ["reduce", "decrease"],
    ["prepare for", "get ready for"],
    ["turn off", "switch off"],
    ["turn on", "switch on"],
    ["prevent", "avoid"],
    ["happen", "occur"],
    ["move to", "relocate to"],
    ["calculate", "compute"],
    ["get a job", "find a job", "land a job"],
    ["overcome", "get over"],
    ["deal with", "cope with"],
    ["fall asleep", "get to sleep"],
    ["quickly", "rapidly"],
    ["big", "large"],
    ["huge", "enormous"],
    ["famous", "well-known"],
    ["difficult", "challenging"],
    ["easy", "simple"],
    ["cheap", "inexpensive", "affordable"],
    ["expensive", "costly", "pricey"],
    ["intelligent", "clever"],
    ["whole", "entire"],
    ["scared", "afraid", "frightened"],
    ["sick", "ill"],
    ["mistake", "error"],
    ["kids", "children"],
    ["movie", "film"],
    ["movies", "films"],
    ["doctor", "physician"],
    ["advantages", "benefits", "pros"],
    ["disadvantages", "drawbacks", "cons"],
    ["tips", "advice", "suggestions"],
    ["ways", "methods"],
    ["price of", "cost of"],
    ["country", "nation"],
    ["company", "firm"],
    ["email", "e-mail"],
    ["tv", "television"],
    ["maybe", "perhaps"],
    ["nowadays", "these days"],
    ["before", "prior to"],
    ["a lot of", "lots of"],
    ["phone", "cell phone", "mobile phone", "smartphone"],
    ["car", "automobile"],
    ["hire", "employ"],
    ["wake up early", "get up early"],
    ["understand", "grasp"],
    ["enhance", "improve"],
    ["assist me", "help me"],
    ["angry", "mad"],
    ["begin learning", "start learning"],
    ["go abroad", "travel abroad"],
    ["live longer", "extend my life"],
    ["gain weight", "put on weight"],
    ["lose weight", "shed pounds", "slim down"],
    ["stop smoking", "quit smoking"],
    ["look for", "search for", "seek"],
    ["beginner", "novice"],
    ["beginners", "novices"],
    ["vacation", "holiday"],
    ["garbage", "trash", "rubbish"],
    ["sofa", "couch"],
    ["fridge", "refrigerator"],
    ["dinner", "supper"],
    ["photos", "pictures"],
    ["quit my job", "resign from my job", "leave my job"],
    ["boss", "manager"],
    ["coworker", "colleague"],
    ["coworkers", "colleagues"],
    ["neighbours", "neighbors"],
    ["colour", "color"],
    ["centre", "center"],
    ["how much time", "how long"],
]

_ES: list[list[str]] = [
    ["comprar", "adquirir"],
    ["arreglar", "reparar"],
    ["empezar", "comenzar", "iniciar"],
    ["borrar", "eliminar", "suprimir"],
    ["quitar", "sacar"],
    ["cambiar", "modificar"],
    ["conseguir", "obtener", "lograr"],
    ["teléfono", "móvil", "celular"],
    ["ordenador", "computadora"],
    ["coche", "auto", "carro"],
    ["rápidamente", "deprisa", "con rapidez"],
    ["fácil", "sencillo"],
    ["difícil", "complicado"],
    ["barato", "económico"],
    ["caro", "costoso"],
    ["error", "fallo"],
    ["correo electrónico", "email", "e-mail"],
    ["tienda", "comercio"],
    ["médico", "doctor"],
    ["precio", "coste", "costo"],
    ["ventajas", "beneficios"],
    ["desventajas", "inconvenientes"],
    ["consejos", "recomendaciones"],
    ["formas", "maneras", "modos"],
    ["encontrar", "localizar", "hallar"],
    ["usar", "utilizar", "emplear"],
    ["encender", "prender"],
    ["desactivar", "deshabilitar"],
    ["activar", "habilitar"],
    ["cancelar", "anular"],
    ["contraseña", "clave"],
    ["trabajo", "empleo"],
    ["quizás", "tal vez", "a lo mejor"],
    ["pedido", "encargo"],
    ["descargar", "bajar"],
    ["pedir", "solicitar"],
    ["nevera", "frigorífico", "refrigerador"],
    ["foto", "fotografía"],
    ["fotos", "fotografías"],
    ["jefe", "superior"],
    ["bajar de peso", "adelgazar", "perder peso"],
    ["dejar de fumar", "abandonar el tabaco"],
    ["coger el autobús", "tomar el autobús"],
    ["piso", "apartamento"],
    ["ayuda", "asistencia"],
]


def _split(groups: list[list[str]]) -> tuple[list[list[str]], list[list[str]]]:
    return [g for i, g in enumerate(groups) if i % 5 != 4], groups[4::5]


TRAIN_EN, HELD_EN = _split(_EN)
TRAIN_ES, HELD_ES = _split(_ES)
#: Groups kept out of training: the ``val_synonym`` split is made from them alone.
HELD_OUT = HELD_EN + HELD_ES


def synonym(q: str, rng: random.Random, groups: list[list[str]]) -> str | None:
    """``q`` with one word of ``groups`` replaced by a synonym, and half the time its
    question form rewritten as well; None when no group word occurs."""
    new = swap_from_groups(q, groups, rng)
    if new is None:
        return None
    if rng.random() < 0.5:
        framed = rephrase(new, rng)
        if framed and norm(framed) != norm(new):
            new = framed
    return new


def synonym_rows(
    questions: list[str], rng: random.Random, n: int, groups: list[list[str]], kind: str
) -> list[tuple[Pair, str]]:
    """Up to ``n`` positives (question, its synonym paraphrase), each side first at random; a
    small base is passed over again (up to five times), never repeating a pair."""
    out: list[tuple[Pair, str]] = []
    seen: set[tuple[str, str]] = set()
    for _ in range(5):
        order = list(range(len(questions)))
        rng.shuffle(order)
        for i in order:
            if len(out) >= n:
                return out
            src = questions[i]
            new = synonym(src, rng, groups)
            if new is None or norm(new) == norm(src) or (norm(src), norm(new)) in seen:
                continue
            seen.add((norm(src), norm(new)))
            a, b = (src, new) if rng.random() < 0.5 else (new, src)
            out.append((Pair(a, b, True), kind))
    return out


def slot_rows(
    slots: list[tuple[list[str], dict[str, str]]],
    rng: random.Random,
    n: int,
    groups: list[list[str]],
    kind: str,
) -> list[tuple[Pair, str]]:
    """Up to ``n`` positives from question forms with slots: two forms of one intent, one of
    them with a synonym in a slot ("¿Cómo borro mi cuenta?" / "¿Qué pasos sigo para eliminar
    mi cuenta?"); never repeating a pair."""
    usable = [
        (forms, values, key)
        for forms, values in slots
        for key in values
        if swap_from_groups(values[key], groups, rng) is not None
    ]
    out: list[tuple[Pair, str]] = []
    seen: set[tuple[str, str]] = set()
    for _ in range(50 * n):
        if len(out) >= n or not usable:
            break
        forms, values, key = rng.choice(usable)
        swapped = swap_from_groups(values[key], groups, rng)
        first, second = rng.sample(forms, 2) if len(forms) > 1 else (forms[0], forms[0])
        a = first.format(**values)
        b = second.format(**{**values, key: swapped})
        if norm(a) == norm(b) or (norm(a), norm(b)) in seen:
            continue
        seen.add((norm(a), norm(b)))
        out.append((Pair(a, b, True) if rng.random() < 0.5 else Pair(b, a, True), kind))
    return out


def contrast_rows(
    questions: list[str],
    rng: random.Random,
    n: int,
    groups: list[list[str]],
    rules: dict[str, Rule],
) -> list[tuple[Pair, str]]:
    """Up to ``n`` negatives that pair a question with a synonym paraphrase of it that ALSO
    had its meaning changed by a family rule (an antonym, a negation, a qualifier added or
    dropped, another entity or number): a synonym never makes a changed question the same one.
    Kind ``synonym_<family>``."""
    names = sorted(rules)
    order = list(range(len(questions)))
    rng.shuffle(order)
    out: list[tuple[Pair, str]] = []
    for i in order:
        if len(out) >= n:
            break
        src = questions[i]
        para = swap_from_groups(src, groups, rng)
        if para is None:
            continue
        name = rng.choice(names)
        changed = rules[name](para, rng)
        if changed is None or norm(changed) in (norm(src), norm(para)):
            continue
        a, b = (src, changed) if rng.random() < 0.5 else (changed, src)
        out.append((Pair(a, b, False), f"synonym_{name}"))
    return out
