"""Word lists for the surface checks of :mod:`deja.semantic.mismatch`, English and Spanish:
number words, units, ordinals, negations, words that make order meaningless, stop words.
Kept apart because they are data, not logic (as :mod:`deja.semantic.antonyms`)."""

from __future__ import annotations

NUMBER_WORDS = {
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
    NUMBER_WORDS.pop(_w)
NUMBER_WORDS.update({"dozen": "12", "docena": "12", "hundred": "100", "thousand": "1000"})
#: Words that count without being numerals ("double-sided", "both sides", "twice a day"): they
#: match a numeral on the other side ("doble cara" / "dos caras") and differ from another such
#: word ("once" / "twice"), but one against nothing is no mismatch ("both X and Y" / "X and Y",
#: "once I've installed it" / "after I installed it").
SOFT_NUMBER_WORDS = {
    **dict.fromkeys(("once", "single"), "1"),
    **dict.fromkeys(("twice", "double", "doble", "both", "ambos", "ambas"), "2"),
    **dict.fromkeys(("thrice", "triple"), "3"),
}

UNIT_GROUPS: dict[str, tuple[str, ...]] = {
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
UNITS = {w: u for u, ws in UNIT_GROUPS.items() for w in ws}
# Words that are units only next to a number ("a second opinion", "por favor", "in time").
UNIT_NEEDS_NUMBER = frozenset(
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
ORDINALS = {
    **dict.fromkeys(("first", "1st", "primero", "primera", "primer"), "1"),
    **dict.fromkeys(("second", "2nd", "segundo", "segunda"), "2"),
    **dict.fromkeys(("third", "3rd", "tercero", "tercera", "tercer"), "3"),
    **dict.fromkeys(("fourth", "4th", "cuarto", "cuarta"), "4"),
    **dict.fromkeys(("fifth", "5th", "quinto", "quinta"), "5"),
    **dict.fromkeys(("sixth", "6th", "sexto", "sexta"), "6"),
    **dict.fromkeys(("seventh", "7th", "séptimo", "séptima"), "7"),
    **dict.fromkeys(("eighth", "8th", "octavo", "octava"), "8"),
    **dict.fromkeys(("ninth", "9th", "noveno", "novena"), "9"),
    **dict.fromkeys(("tenth", "10th", "décimo", "décima"), "10"),
    **dict.fromkeys(("penultimate", "penúltimo", "penúltima"), "penultimate"),
    **dict.fromkeys(("last", "último", "última", "final"), "last"),
    **dict.fromkeys(("next", "próximo", "próxima", "siguiente"), "next"),
    **dict.fromkeys(("previous", "anterior"), "previous"),
}
# Ordinal words that are something else next to these: "last" is a verb after "will", "it"…
# or before "longer", "forever"… ("will it last", "make it last longer"); "más próxima" is
# "nearest", not "next"; "un segundo", "por segundo" are the unit of time.
NOT_ORDINAL_AFTER = {
    "last": frozenset(
        {"to", "will", "would", "can", "could", "does", "do", "did", "should", "it", "they"}
    ),
    "segundo": frozenset({"un", "cada", "por", "medio", "al"}),
    "próximo": frozenset({"más"}),
    "próxima": frozenset({"más"}),
}
NOT_ORDINAL_BEFORE = {
    "last": frozenset({"longer", "long", "forever", "for", "until", "through", "beyond"}),
}
#: Prepositions of direction, read before the same word on both sides: "flights to Rome" /
#: "flights from Rome", "vuelos a Roma" / "vuelos desde Roma" ask opposite things. Each word
#: names its language, so the English article "a" never faces "from".
DIRECTIONS = {
    **dict.fromkeys(("to", "into", "towards", "toward", "onto"), ("to", "en")),
    "from": ("from", "en"),
    **dict.fromkeys(("a", "al", "hacia"), ("to", "es")),
    "desde": ("from", "es"),
}
#: Words after such a preposition that name no place ("compare to each other" / "differ from
#: each other").
NOT_A_PLACE = frozenset({"each", "one", "another"})
#: The kind of answer a question's first word asks for: "Where was X born?" and "When was X
#: born?" share every other word and need different answers. "how", "what" and "which" are
#: left out: "What time is breakfast?" is "When is breakfast?", "How do I get there?" is
#: "What is the way there?". "por qué" is read in mismatch.py.
QUESTION_WORDS = {
    **dict.fromkeys(("where", "dónde", "donde", "adónde", "adonde"), "place"),
    **dict.fromkeys(("when", "cuándo", "cuando"), "time"),
    **dict.fromkeys(("who", "whom", "quién", "quien", "quiénes", "quienes"), "person"),
    "why": "reason",
}
#: Closed classes of names that people often type in lower case (and Spanish always writes
#: so): weekdays, months, languages and continents; and the basic colours, which change what
#: a question asks as much ("makeup for a red dress" / "for a green dress"). One member
#: swapped for another of its class is a named-entity mismatch however it is written
#: ("pharmacy hours on sunday" / "on monday", "aprender inglés" / "aprender alemán"). English
#: "may" and "march" are left out: they are verbs more often than months; and "gray", so that
#: "grey" / "gray" is no swap.
NAME_CLASSES: dict[str, str] = {
    "weekday": (
        "monday tuesday wednesday thursday friday saturday sunday lunes martes miércoles "
        "miercoles jueves viernes sábado sabado domingo"
    ),
    "month": (
        "january february april june july august september october november december enero "
        "febrero marzo abril mayo junio julio agosto septiembre setiembre octubre noviembre "
        "diciembre"
    ),
    "language": (
        "english spanish french german italian portuguese dutch russian chinese mandarin "
        "cantonese japanese korean arabic hindi turkish greek polish swedish catalan basque "
        "galician inglés ingles español espanol castellano francés frances alemán aleman "
        "italiano portugués portugues holandés holandes ruso chino mandarín japonés japones "
        "coreano árabe arabe turco griego polaco sueco catalán euskera gallego"
    ),
    "continent": (
        "africa europe asia oceania antarctica áfrica europa oceanía antártida antartida"
    ),
    "colour": (
        "red blue green yellow black white orange purple pink brown grey rojo roja rojos rojas "
        "azul azules verde verdes amarillo amarilla amarillos amarillas negro negra negros "
        "negras blanco blanca blancos blancas morado morada morados moradas marrón marrones gris "
        "grises"
    ),
}
NAME_CLASS = {w: c for c, words in NAME_CLASSES.items() for w in words.split()}
#: First words that make a text a question when it was typed without its question mark ("how
#: do i reset my phone", "es bueno correr de noche"): question words and the verbs that open a
#: yes/no question (besides :data:`QUESTION_WORDS`), English and Spanish, with and without accents.
QUESTION_START_WORDS = (
    "how what whose which is are was were am do does did can could should would will shall "
    "may might must has have had isn't aren't don't doesn't can't cómo como qué que cuál "
    "cual cuáles cuales cuánto cuanto cuánta cuanta cuántos cuantos cuántas cuantas es son "
    "está esta están estan hay puedo puede puedes pueden se debo debe tengo tiene vale "
    "sirve"
)
QUESTION_STARTS = frozenset(QUESTION_WORDS) | frozenset(QUESTION_START_WORDS.split())
#: Words whose suffix symbol names another thing (three languages: C, C++, C#).
CODE_WORDS = frozenset({"c", "c++", "c#", "f#", "j#", "g++", "x++", "a+", "b+"})
NEGATIONS = frozenset(
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
# Words that make word order meaningless ("difference between X and Y" = "… Y and X").
SYMMETRIC = frozenset(
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
#: English pronouns that show their role by case: "I"/"me", "he"/"him" …
CASED_PRONOUNS = frozenset({"i", "me", "he", "him", "she", "her", "we", "us", "they", "them"})
#: Forms that differ only by case or agreement, joined when two questions are compared for
#: swapped roles ("Why does my boss email me?" / "Why do I email my boss?").
CASE_NEUTRAL = {
    "me": "i",
    "him": "he",
    "her": "she",
    "us": "we",
    "them": "they",
    "does": "do",
    "did": "do",
    "am": "be",
    "is": "be",
    "are": "be",
    "was": "be",
    "were": "be",
}
STOP_WORDS = (
    "a an the is are was were be do does did i my me you your it its of in on at for to and or "
    "how what which who why when where can could should would will with this that there as by "
    "from about into than if so we our they their he she his her el la los las un una de del "
    "en y o que es son por para con se mi tu cómo qué cuál cuándo dónde hay lo al"
)
STOP = frozenset(STOP_WORDS.split())
#: Dropped when two questions' words are compared for a reordering.
ARTICLES = frozenset(
    {"el", "la", "los", "las", "lo", "un", "una", "unos", "unas", "the", "a", "an"}
)
