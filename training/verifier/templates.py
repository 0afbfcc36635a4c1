"""Templated everyday questions in English and Spanish: paraphrase pairs (one intent in two
question forms) and close-but-different pairs (the same form with one slot changed: the
object, a number, a place, a direction or a negation).

Quora has almost no short help-desk questions and no Spanish; these fill that gap with
combinatorial rows from small slot lists. The slot lists and forms were written for this
module; the hand-written generalisation set (``tests/data/generalisation.jsonl``) is not read.
"""

from __future__ import annotations

import random

from training.verifier.common import Pair

# (verb phrase EN, verb phrase ES): "reset my password"
_TASKS = [
    ("reset my password", "restablecer mi contraseña"),
    ("update the app", "actualizar la aplicación"),
    ("cancel my subscription", "cancelar mi suscripción"),
    ("change my email address", "cambiar mi correo electrónico"),
    ("delete my account", "eliminar mi cuenta"),
    ("export my contacts", "exportar mis contactos"),
    ("connect the printer", "conectar la impresora"),
    ("set up two-factor authentication", "configurar la verificación en dos pasos"),
    ("back up my photos", "hacer una copia de seguridad de mis fotos"),
    ("return an order", "devolver un pedido"),
    ("track my package", "rastrear mi paquete"),
    ("book a meeting room", "reservar una sala de reuniones"),
    ("request a refund", "pedir un reembolso"),
    ("add a new user", "añadir un usuario nuevo"),
    ("renew my licence", "renovar mi licencia"),
    ("clear the cache", "borrar la caché"),
    ("share a folder", "compartir una carpeta"),
    ("join the wifi network", "conectarme a la red wifi"),
    ("open a bank account", "abrir una cuenta bancaria"),
    ("report a bug", "informar de un error"),
    ("change the language", "cambiar el idioma"),
    ("download my invoice", "descargar mi factura"),
    ("pay by card", "pagar con tarjeta"),
    ("turn on dark mode", "activar el modo oscuro"),
]
_HOW_EN = [
    "How do I {t}?",
    "How can I {t}?",
    "What is the process to {t}?",
    "What are the steps to {t}?",
    "I need to {t}, how?",
    "Can you explain how to {t}?",
    "What do I do to {t}?",
    "how to {t}",
    "Is there a way to {t}?",
    "Help me {t}.",
]
_HOW_ES = [
    "¿Cómo puedo {t}?",
    "¿Cómo hago para {t}?",
    "¿Qué pasos sigo para {t}?",
    "¿Cuál es la forma de {t}?",
    "Necesito {t}, ¿cómo se hace?",
    "¿Me explicas cómo {t}?",
    "¿Qué tengo que hacer para {t}?",
    "cómo {t}",
    "¿Hay alguna manera de {t}?",
]
_NOT_EN = ["Why can't I {t}?", "I am unable to {t}, why?", "What happens if I don't {t}?"]
_NOT_ES = ["¿Por qué no puedo {t}?", "No consigo {t}, ¿por qué?", "¿Qué pasa si no {t}?"]

# (place EN, place ES)
_PLACES = [
    ("the pharmacy", "la farmacia"),
    ("the train station", "la estación de tren"),
    ("the nearest ATM", "el cajero más cercano"),
    ("the library", "la biblioteca"),
    ("the post office", "la oficina de correos"),
    ("the swimming pool", "la piscina"),
    ("the reception desk", "la recepción"),
    ("the parking lot", "el aparcamiento"),
    ("the museum", "el museo"),
    ("the supermarket", "el supermercado"),
    ("the hospital", "el hospital"),
    ("the bus stop", "la parada de autobús"),
]
_WHERE_EN = [
    "Where is {p}?",
    "Where can I find {p}?",
    "How do I get to {p}?",
    "where's {p}",
    "Which way is {p}?",
]
_WHERE_ES = [
    "¿Dónde está {p}?",
    "¿Dónde queda {p}?",
    "¿Dónde se encuentra {p}?",
    "¿Cómo llego a {p}?",
    "dónde está {p}",
]
_OPEN_EN = ["What time does {p} open?", "When does {p} open?", "What are the opening hours of {p}?"]
_OPEN_ES = ["¿A qué hora abre {p}?", "¿Cuándo abre {p}?", "¿Cuál es el horario de apertura de {p}?"]
_CLOSE_EN = ["What time does {p} close?", "When does {p} close?"]
_CLOSE_ES = ["¿A qué hora cierra {p}?", "¿Cuándo cierra {p}?"]

# (amount EN, amount ES) quantities for numeric/unit forms
_CONVERT = [
    ("miles", "kilometers", "millas", "kilómetros"),
    ("pounds", "kilograms", "libras", "kilos"),
    ("Fahrenheit", "Celsius", "Fahrenheit", "Celsius"),
    ("dollars", "euros", "dólares", "euros"),
    ("inches", "centimeters", "pulgadas", "centímetros"),
    ("hours", "minutes", "horas", "minutos"),
]
_CONV_EN = [
    "How do I convert {x} to {y}?",
    "How can I change {x} into {y}?",
    "What is the formula to go from {x} to {y}?",
]
_CONV_ES = [
    "¿Cómo convierto {x} a {y}?",
    "¿Cómo paso de {x} a {y}?",
    "¿Cuál es la fórmula para pasar de {x} a {y}?",
]
_COST_EN = ["How much does {n} {u} cost?", "What is the price of {n} {u}?", "What do {n} {u} cost?"]
_COST_ES = [
    "¿Cuánto cuestan {n} {u}?",
    "¿Qué precio tienen {n} {u}?",
    "¿Cuál es el precio de {n} {u}?",
]
_GOODS = [
    ("tickets", "entradas"),
    ("nights at the hotel", "noches de hotel"),
    ("bags of coffee", "bolsas de café"),
    ("licences", "licencias"),
    ("seats", "asientos"),
]


def _pair_from(forms: list[str], rng: random.Random, **slots: str) -> tuple[str, str]:
    a, b = rng.sample(forms, 2)
    return a.format(**slots), b.format(**slots)


def _one(forms: list[str], rng: random.Random, **slots: str) -> str:
    return rng.choice(forms).format(**slots)


def template_pairs(rng: random.Random, n: int) -> list[tuple[Pair, str]]:
    """About ``n`` templated rows, half paraphrases, half close-but-different, each with its
    family name (``tpl_para_en``, ``tpl_object_es`` …)."""
    out: list[tuple[Pair, str]] = []
    while len(out) < n:
        es = rng.random() < 0.45
        lang = "es" if es else "en"
        kind = rng.randrange(6)
        if kind == 0:  # task: paraphrase / other task / negated
            i, j = rng.sample(range(len(_TASKS)), 2)
            t, u = _TASKS[i][es], _TASKS[j][es]
            forms = _HOW_ES if es else _HOW_EN
            out.append((Pair(*_pair_from(forms, rng, t=t), True), f"tpl_para_{lang}"))
            out.append(
                (Pair(_one(forms, rng, t=t), _one(forms, rng, t=u), False), f"tpl_object_{lang}")
            )
            out.append(
                (
                    Pair(_one(forms, rng, t=t), _one(_NOT_ES if es else _NOT_EN, rng, t=t), False),
                    f"tpl_negation_{lang}",
                )
            )
        elif kind == 1:  # place: paraphrase / other place
            i, j = rng.sample(range(len(_PLACES)), 2)
            p, q = _PLACES[i][es], _PLACES[j][es]
            forms = _WHERE_ES if es else _WHERE_EN
            out.append((Pair(*_pair_from(forms, rng, p=p), True), f"tpl_para_{lang}"))
            out.append(
                (Pair(_one(forms, rng, p=p), _one(forms, rng, p=q), False), f"tpl_entity_{lang}")
            )
        elif kind == 2:  # opening hours: paraphrase / open vs close (antonym)
            p = rng.choice(_PLACES)[es]
            opens, closes = (_OPEN_ES, _CLOSE_ES) if es else (_OPEN_EN, _CLOSE_EN)
            out.append((Pair(*_pair_from(opens, rng, p=p), True), f"tpl_para_{lang}"))
            out.append(
                (Pair(_one(opens, rng, p=p), _one(closes, rng, p=p), False), f"tpl_antonym_{lang}")
            )
        elif kind == 3:  # conversion: paraphrase / reversed direction
            c = rng.choice(_CONVERT)
            x, y = (c[2], c[3]) if es else (c[0], c[1])
            forms = _CONV_ES if es else _CONV_EN
            out.append((Pair(*_pair_from(forms, rng, x=x, y=y), True), f"tpl_para_{lang}"))
            out.append(
                (
                    Pair(_one(forms, rng, x=x, y=y), _one(forms, rng, x=y, y=x), False),
                    f"tpl_direction_{lang}",
                )
            )
        else:  # price of N things: paraphrase / other N
            g = rng.choice(_GOODS)[es]
            k = rng.choice([2, 3, 4, 5, 10, 12, 20, 50])
            m = rng.choice([v for v in (1, 2, 3, 4, 5, 6, 10, 15, 25, 100) if v != k])
            forms = _COST_ES if es else _COST_EN
            out.append((Pair(*_pair_from(forms, rng, n=str(k), u=g), True), f"tpl_para_{lang}"))
            out.append(
                (
                    Pair(_one(forms, rng, n=str(k), u=g), _one(forms, rng, n=str(m), u=g), False),
                    f"tpl_number_{lang}",
                )
            )
    rng.shuffle(out)
    return out[:n]


def spanish_slots() -> list[tuple[list[str], dict[str, str]]]:
    """Each Spanish question form list with one filling of its slots: the Spanish base that
    :mod:`training.verifier.synonyms` rewrites (Quora has no Spanish)."""
    out: list[tuple[list[str], dict[str, str]]] = [(_HOW_ES, {"t": t[1]}) for t in _TASKS]
    for forms in (_WHERE_ES, _OPEN_ES, _CLOSE_ES):
        out += [(forms, {"p": p[1]}) for p in _PLACES]
    out += [(_COST_ES, {"n": "2", "u": g[1]}) for g in _GOODS]
    return out
