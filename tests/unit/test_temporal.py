"""Temporal bypass: the shared dev set plus harder hand-made cases in both languages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deja.temporal.rules import TemporalDetector

DEV_SET = Path(__file__).resolve().parents[3] / "shared" / "data" / "temporal_dev.jsonl"
detector = TemporalDetector()


def test_dev_set_recall_and_false_bypass() -> None:
    if not DEV_SET.exists():
        pytest.fail(f"dev set missing at {DEV_SET}")
    rows = [json.loads(line) for line in DEV_SET.read_text().splitlines() if line.strip()]
    volatile = [r["query"] for r in rows if r["volatile"]]
    stable = [r["query"] for r in rows if not r["volatile"]]
    recall = sum(detector.check(q) is not None for q in volatile) / len(volatile)
    false_bypass = sum(detector.check(q) is not None for q in stable) / len(stable)
    assert recall >= 0.95, recall
    assert false_bypass <= 0.05, false_bypass


PROBE = Path(__file__).resolve().parents[1] / "data" / "temporal_probe.jsonl"


def test_probe_written_before_the_standing_answer_rules() -> None:
    """``tests/data/temporal_probe.jsonl``, written on 7 December as everyday questions, before
    the standing-answer patterns and without the rules at hand: 50 questions with a time word
    (today, right now, latest, hoy, ahora mismo, último …), 50 timeless everyday ones, half in
    Spanish, and 25 whose answer changes with no time word in them ("Who won the Super Bowl?",
    "¿Cuántos habitantes tiene Madrid?"). The rules bypass every marked one and no timeless one;
    they catch 14 of the 25 unmarked ones (a known limit: prices, populations and standings
    asked plainly), and that must not drop."""
    rows = [json.loads(line) for line in PROBE.read_text(encoding="utf-8").splitlines() if line]
    bypassed: dict[str, list[str]] = {}
    kept: dict[str, list[str]] = {}
    for row in rows:
        found = detector.check(row["query"]) is not None
        (bypassed if found else kept).setdefault(row["kind"], []).append(row["query"])
    assert sum(r["kind"] == "marked" for r in rows) == sum(r["kind"] == "timeless" for r in rows)
    assert not kept.get("marked"), kept.get("marked")
    assert not bypassed.get("timeless"), bypassed.get("timeless")
    assert len(bypassed.get("unmarked", [])) >= 14, kept.get("unmarked")


@pytest.mark.parametrize(
    "query",
    [
        "What's the latest news on the merger?",
        "what is the newest iPhone",
        "Who is currently the CEO of OpenAI?",
        "How is the market doing right now",
        "Show me tonight's schedule",
        "What did the board decide yesterday?",
        "Is the deploy still running as of now?",
        "What happened last week in the standup?",
        "How many users signed up so far?",
        "What's the current exchange rate for EUR to USD?",
        "What are the most recent commits?",
        "¿Cuál es la cotización actual del dólar?",
        "¿Qué pasó anoche en el partido?",
        "¿Hay novedades esta tarde?",
        "¿Cuántos pedidos llevamos hasta ahora?",
        "Dame las últimas noticias",
        "¿Cuál es la ultima version publicada?",  # no accents
        "¿Qué hay para cenar esta noche?",
        "¿Cuál es la versión más reciente?",
        "¿Qué tareas tengo para mañana?",
    ],
)
def test_volatile_questions_bypass(query: str) -> None:
    assert detector.check(query) is not None


@pytest.mark.parametrize(
    "query",
    [
        "What is alternating current?",
        "Explain the difference between alternating current and direct current.",
        "How do I open a current account?",
        "What is the latest time I can cancel my booking?",
        "Submit the form by Friday at the latest.",
        "How does an ocean current form?",
        "Calculate the current through the resistor in this circuit.",
        "Now that I have Python installed, how do I create a venv?",
        "Now, explain how PagedAttention works.",
        "From now on, answer in French: what is a monad?",
        "How do I get the last element of a list?",
        "¿Cómo obtengo el último elemento de una lista?",
        "¿Cómo se calcula el valor actual neto?",
        "¿A qué hora abren por la mañana?",
        "Ahora bien, ¿qué es un embedding?",
        "What is the capital of France?",
        "Summarise the refund policy.",
        "Write a haiku about autumn.",
        "Why do ocean currents swirl?",
        "knowledge of history",  # 'now' inside a word
    ],
)
def test_timeless_uses_do_not_bypass(query: str) -> None:
    assert detector.check(query) is None, detector.check(query)


@pytest.mark.parametrize(
    "query",
    [
        # what comes next
        "When is the next eclipse visible from Europe?",
        "Any upcoming sales on Amazon?",
        "¿Cuándo es el próximo partido de España?",
        "¿Cuándo es la siguiente reunión del consejo?",
        # whether it has happened yet
        "Has Apple released iOS 19 yet?",
        "Did the Senate already vote on the bill?",
        "¿Ya han dado las notas?",
        "¿Aún hay entradas para el concierto?",
        # the time or the date itself
        "What time is it?",
        "what's the date",
        "Which day of the week is it?",
        "qué hora es en Madrid",
        "¿Qué día es?",
        "¿En qué año estamos?",
        # change since a point in time
        "How much has gold risen since last week?",
        "What has changed in the repo since Monday?",
        "¿Qué ha pasado desde el lunes?",
        "¿Cuánto ha subido la luz desde enero?",
        # current state
        "Is Angela Merkel still chancellor?",
        "As of this week, what is the unemployment rate?",
        "¿Sigue lloviendo en Bilbao?",
        "¿Todavía está disponible la oferta?",
        # prices, scores, weather, news, open now, office holders
        "What's Nvidia's share price?",
        "¿A cuánto está la gasolina?",
        "Did Barcelona win last night?",
        "¿Quién ganó el Tour?",
        "Will it rain in Paris this weekend?",
        "¿Va a hacer frío el sábado?",
        "What are the top stories?",
        "Is Slack down?",
        "¿Está abierto el museo del Prado?",
        "Who is the prime minister of Italy?",
        "¿Quién es el presidente de Estados Unidos?",
        # countdowns and ages relative to now
        "How many days until Halloween?",
        "¿Cuántos días quedan para Navidad?",
        "How old is Lionel Messi?",
        "¿Qué edad tiene Rafa Nadal?",
        "What’s today’s date?",  # curly apostrophes
    ],
)
def test_new_volatile_families_bypass(query: str) -> None:
    assert detector.check(query) is not None


@pytest.mark.parametrize(
    "query",
    [
        # "next" in code, maths and books
        "What is the next step after installing Docker?",
        "How do I iterate to the next item in a Python generator?",
        "What is Next.js?",
        "Explain the next permutation algorithm.",
        "¿Cuál es el siguiente paso después de instalar Python?",
        "¿Qué ocurre en el próximo capítulo del Quijote?",
        "¿Qué países forman Oriente Próximo?",
        # yet / already / ya / todavía as words, or in code
        "What does 'yet' mean in this sentence?",
        "What is the difference between still and yet?",
        "How do I check if a key already exists in a dict?",
        "¿Qué significa 'todavía'?",
        "¿Cómo compruebo si un archivo ya existe en Python?",
        "Ya que estamos, ¿qué es un embedding?",
        # today / tomorrow / mañana as words or titles
        "How do you say today in French?",
        "¿Cómo se dice mañana en inglés?",
        "Tomorrow Never Dies plot",
        "Who directed Edge of Tomorrow?",
        # time, date and since with a fixed answer
        "What is the time complexity of quicksort?",
        "What time zone is Tokyo in?",
        "How do I get today's date in Python?",
        "¿Cómo obtengo la fecha actual en JavaScript?",
        "Since when has Slovakia been an independent country?",
        "¿Desde cuándo existe la ONU?",
        # same topics, timeless
        "How does inflation work?",
        "¿Cómo se calcula el IVA?",
        "Who won the 1998 World Cup?",
        "Who won the Battle of Waterloo?",
        "¿Quién ganó la Segunda Guerra Mundial?",
        "Who was the first president of France?",
        "How old was Mozart when he died?",
        "¿Cuántos años tiene un siglo?",
        "¿Qué tiempo hace falta para aprender inglés?",
        "¿Por qué hace frío en los polos?",
        "How do weather satellites work?",
        "¿Cuál fue la última obra de Lorca?",
        "What is a still life painting?",
        "Overnight oats recipe",
        "What are the days of the week in Spanish?",
        "What's the actual difference between RAM and ROM?",
    ],
)
def test_new_timeless_traps_do_not_bypass(query: str) -> None:
    assert detector.check(query) is None, detector.check(query)


def test_deployments_can_add_patterns() -> None:
    custom = TemporalDetector(extra_patterns=[r"\bon[- ]?call\b", r"\bsprint goal\b"])
    assert custom.check("Who is on call?") is not None
    assert custom.check("What's the sprint goal?") is not None
    assert TemporalDetector().check("Who is on call?") is None


def test_reports_what_matched() -> None:
    found = detector.check("What changed in the latest release?")
    assert found is not None and found.matched.lower() == "latest" and found.reason == "temporal"


CLASSIFIER = (
    Path(__file__).resolve().parents[2] / "deja" / "models" / "temporal" / "classifier.json"
)


def test_classifier_file_contract() -> None:
    """The embedding classifier: volatile when sigmoid(weights . v + bias) >= threshold for the
    query's unit embedding v from the embedder named in the file."""
    from deja.embedding.onnx.embedder import DYNINT8_ID

    model = json.loads(CLASSIFIER.read_text())
    assert model["embedder_model_id"] == DYNINT8_ID
    assert model["dim"] == 384 and len(model["weights"]) == 384
    assert all(isinstance(w, float) for w in model["weights"])
    assert isinstance(model["bias"], float)
    assert 0.5 <= model["threshold"] < 1.0
    assert "sha256" in model["trained_on"]
    assert {"cv", "test", "dev"} <= set(model["metrics"])


@pytest.mark.parametrize(
    ("question", "volatile"),
    [
        ("How is the stock market doing?", True),
        ("¿Cómo va la bolsa?", True),
        ("Is it raining in London?", True),
        ("What's the traffic like on I-95?", True),
        ("¿Hay atasco en la M-30?", True),
        ("Which movies are playing in theaters?", True),
        ("Are there disruptions on the Piccadilly line?", True),
        ("Is there a strike at the airport?", True),
        ("¿Hay huelga de taxis?", True),
        ("¿A cómo se cotiza el euro?", True),
        ("¿A cómo están los tomates en el mercado?", True),
        ("What causes flight delays?", False),
        ("Why do workers go on strike?", False),
        ("Is there a fee for late cancellations?", False),
        ("¿Cómo está formado un átomo?", False),
        ("Why does it snow?", False),
        ("Is it raining cats and dogs an idiom?", False),
        ("How do traffic lights work?", False),
        ("What is traffic engineering?", False),
    ],
)
def test_the_state_of_things_now_without_a_time_word(question: str, volatile: bool) -> None:
    assert (TemporalDetector().check(question) is not None) is volatile


@pytest.mark.parametrize(
    ("question", "volatile"),
    [
        # how long ahead of something to act: advice, not a countdown
        ("How long before an exam should I stop studying?", False),
        ("How many hours before surgery do I need to stop eating?", False),
        ("How long before the store closes?", True),
        ("How much time is left before the deadline?", True),
        # what a place does on every such day (plural) is its policy; "on Saturday" is this one
        ("Are banks open on weekends in Germany?", False),
        ("Does the post office close on public holidays?", False),
        ("¿La biblioteca está cerrada los domingos?", False),
        ("¿Está abierto el zoo en vacaciones?", False),
        ("Is the post office open on Saturday?", True),
        ("¿Está abierta la farmacia el domingo?", True),
        ("¿Está abierto el museo ahora?", True),
        # how to find out whether something still holds is a method
        ("How can I tell if a battery is still good?", False),
        ("How do I check whether my warranty is still valid?", False),
        ("¿Cómo puedo saber si la leche sigue en buen estado?", False),
        ("¿Cómo sé si el pan todavía se puede comer?", False),
        ("Is the store still open?", True),
        ("How do I know if the shop is still open today?", True),
        ("How do I know if my flight today is still on time?", True),
        ("¿Cómo sé si hoy sigue abierto el museo?", True),
        ("¿Sigue abierto el supermercado?", True),
        # an amount of a thing, not its price
        ("How much does a bag of cement weigh?", False),
        ("How much does a cup of dry rice make?", False),
        ("How much does a gallon of gas cost?", True),
        # a place "más próximo" is the nearest one; "el próximo" is the next
        ("¿Dónde está la farmacia más próxima?", False),
        ("¿Cuál es la parada de autobús más próxima al museo?", False),
        ("¿Cuándo sale el próximo tren?", True),
        ("¿Cuál es la fecha más próxima para renovar el pasaporte?", True),
    ],
)
def test_standing_answers_asked_with_a_time_word(question: str, volatile: bool) -> None:
    assert (TemporalDetector().check(question) is not None) is volatile, question
