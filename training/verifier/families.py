"""Rule-made training pairs from real training text: hard negatives for the families a cache
must not confuse (symbols, numbers, units, ordinals, entities, direction and role swaps,
antonyms, negation, narrower/wider questions, tense) and wording-only paraphrases (positives).

Every rule takes one question from the training split and returns a rewritten question, or
None when the rule does not apply. The rules are written from the families' definitions, not
from any evaluation set (the generalisation set in ``tests/data`` was written apart and is
never read here).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from deja.semantic.antonyms import ANTONYMS

Rule = Callable[[str, random.Random], str | None]


def norm(text: str) -> str:
    """Key for overlap checks: case- and whitespace-insensitive."""
    return " ".join(text.lower().split())


def _cap_like(src: str, rep: str) -> str:
    return rep[:1].upper() + rep[1:] if src[:1].isupper() else rep


def swap_from_groups(q: str, groups: list[list[str]], rng: random.Random) -> str | None:
    """Replace the first word of ``q`` found in a group with another member of its group."""
    lookup = {w.lower(): g for g in groups for w in g}
    alts = sorted(lookup, key=len, reverse=True)
    pat = re.compile(r"(?<![\w+#])(" + "|".join(map(re.escape, alts)) + r")(?![\w+#])", re.I)
    m = pat.search(q)
    if not m:
        return None
    word = m.group(0)
    options = [w for w in lookup[word.lower()] if w.lower() != word.lower()]
    rep = rng.choice(options)
    if word.isupper() and len(word) > 1 and rep.isalpha():
        rep = rep.upper()
    elif word[:1].isupper() and rep[:1].islower():
        rep = rep[:1].upper() + rep[1:]
    return q[: m.start()] + rep + q[m.end() :]


# --- symbols ----------------------------------------------------------------------------------

_LANGS = [
    ["C", "C++", "C#", "Objective-C"],
    ["Java", "JavaScript", "Kotlin", "Scala"],
    ["Python", "Ruby", "Perl", "PHP"],
    ["Go", "Rust", "Swift"],
    ["HTML", "CSS", "SQL"],
    [".NET", "ASP.NET"],
    ["F#", "F"],
]
_OPERATORS = [("==", "!="), ("+", "-"), ("*", "^"), ("&&", "||"), ("<", ">"), ("<=", ">=")]


def symbol(q: str, rng: random.Random) -> str | None:
    """A programming-language or operator swap, or a sign/percent/version change on a number."""
    new = swap_from_groups(q, _LANGS, rng)
    if new:
        return new
    for x, y in _OPERATORS:
        for s, t in ((x, y), (y, x)):
            if f" {s} " in q:
                return q.replace(f" {s} ", f" {t} ", 1)
    m = re.search(r"(?<![\w.-])(\d+(?:\.\d+)?)(?![\w.%])", q)
    if m:
        choice = rng.random()
        num = m.group(1)
        rep = f"{num}%" if choice < 0.4 else f"-{num}" if choice < 0.7 else f"v{num}"
        return q[: m.start()] + rep + q[m.end() :]
    m = re.search(r"(\d+)%", q)
    if m:
        return q[: m.start()] + m.group(1) + q[m.end() :]
    return None


# --- numbers, units, ordinals -----------------------------------------------------------------


def number(q: str, rng: random.Random) -> str | None:
    m = re.search(r"(?<![\w.])(\d{1,6})(?![\d])", q)
    if not m:
        return None
    n = int(m.group(1))
    if 1900 <= n <= 2100:
        rep = n + rng.choice([-3, -2, -1, 1, 2, 5])
    else:
        rep = rng.choice([n + 1, n + rng.randint(2, 9), n * 2, max(0, n - 1), n * 10])
    if rep == n:
        rep = n + 1
    return q[: m.start()] + str(rep) + q[m.end() :]


_UNITS = [
    ["km", "miles", "meters"],
    ["kilometers", "miles"],
    ["kg", "pounds", "grams"],
    ["kilograms", "pounds"],
    ["cm", "inches", "mm"],
    ["feet", "meters", "inches"],
    ["Celsius", "Fahrenheit", "Kelvin"],
    ["GB", "MB", "TB"],
    ["hours", "minutes", "days", "weeks"],
    ["hour", "minute", "day", "week", "month", "year"],
    ["months", "years", "weeks"],
    ["dollars", "euros", "rupees", "pounds"],
    ["USD", "EUR", "INR", "GBP"],
    ["liters", "gallons"],
    ["mph", "km/h"],
    ["calories", "grams"],
    ["Mbps", "MB/s"],
    ["kilómetros", "millas", "metros"],
    ["horas", "minutos", "días", "semanas"],
    ["euros", "dólares", "pesos"],
]


def unit(q: str, rng: random.Random) -> str | None:
    return swap_from_groups(q, _UNITS, rng)


_ORDINALS = [
    ["first", "second", "third", "fourth", "fifth", "last"],
    ["1st", "2nd", "3rd", "4th", "5th"],
    ["primero", "segundo", "tercero", "último"],
    ["primera", "segunda", "tercera", "última"],
    ["once", "twice"],
    ["single", "double", "triple"],
]


def ordinal(q: str, rng: random.Random) -> str | None:
    return swap_from_groups(q, _ORDINALS, rng)


# --- named entities -------------------------------------------------------------------------

_ENTITIES = [
    [
        "India",
        "China",
        "Pakistan",
        "Japan",
        "Germany",
        "France",
        "Canada",
        "Australia",
        "Brazil",
        "Russia",
        "Mexico",
        "Spain",
        "Italy",
        "Nigeria",
        "Singapore",
        "Dubai",
    ],
    ["USA", "UK", "US", "UAE"],
    [
        "Delhi",
        "Mumbai",
        "Bangalore",
        "Chennai",
        "Hyderabad",
        "Pune",
        "Kolkata",
        "London",
        "Paris",
        "Tokyo",
        "Berlin",
        "Madrid",
        "Chicago",
        "Toronto",
        "Sydney",
        "Boston",
        "Seattle",
        "Barcelona",
    ],
    [
        "Google",
        "Apple",
        "Microsoft",
        "Amazon",
        "Facebook",
        "Samsung",
        "Netflix",
        "Tesla",
        "Uber",
        "Infosys",
        "Flipkart",
        "IBM",
        "Intel",
        "Oracle",
        "Twitter",
        "Quora",
    ],
    ["Android", "iOS", "Windows", "Linux", "macOS", "Ubuntu"],
    ["iPhone", "iPad", "MacBook", "Pixel", "Galaxy"],
    ["Trump", "Modi", "Obama", "Clinton", "Putin", "Gandhi", "Hitler", "Lincoln"],
    ["Harvard", "Stanford", "MIT", "Oxford", "Cambridge", "IIT"],
    ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"],
    [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ],
    ["Hindu", "Muslim", "Christian", "Jewish", "Buddhist"],
    ["Marvel", "DC"],
    ["Bitcoin", "Ethereum"],
]


def entity(q: str, rng: random.Random) -> str | None:
    return swap_from_groups(q, _ENTITIES, rng)


# --- direction and role swaps -----------------------------------------------------------------

_SPAN = r"[\w+#.\-']+(?: [\w+#.\-']+)?"
_ROLE_PATTERNS = [
    re.compile(
        rf"\b(?P<x>{_SPAN}) (?P<op>better than|worse than|bigger than|smaller than|faster than|"
        rf"slower than|cheaper than|more expensive than|harder than|easier than|richer than|"
        rf"stronger than|older than|taller than|mejor que|peor que|más caro que|vs\.?|versus)"
        rf" (?P<y>{_SPAN})(?P<end>[?.,!]| for | in | with | on | at | para | en |$)",
        re.I,
    ),
    re.compile(
        rf"\bfrom (?P<x>{_SPAN}) to (?P<y>{_SPAN})(?P<end>[?.,!]| in | for | with |$)", re.I
    ),
    re.compile(rf"\bde (?P<x>{_SPAN}) a (?P<y>{_SPAN})(?P<end>[?.,!]| en | para | con |$)", re.I),
    re.compile(
        rf"\b(?:convert|change|switch|translate|transfer|move|upgrade|migrate|convertir|"
        rf"cambiar|pasar|traducir) (?P<x>{_SPAN}) (?:to|into|a|al) (?P<y>{_SPAN})"
        rf"(?P<end>[?.,!]| in | for | with | en | para |$)",
        re.I,
    ),
]


def role_swap(q: str, _rng: random.Random) -> str | None:
    """Swap the two operands of a comparison or a from/to (de/a) direction."""
    for pat in _ROLE_PATTERNS:
        m = pat.search(q)
        if m and norm(m["x"]) != norm(m["y"]):
            xs, xe = m.span("x")
            ys, ye = m.span("y")
            return q[:xs] + m["y"] + q[xe:ys] + m["x"] + q[ye:]
    return None


_ACTORS = [
    ("my dog", "my cat"),
    ("the teacher", "the student"),
    ("a husband", "a wife"),
    ("the employer", "the employee"),
    ("the landlord", "the tenant"),
    ("the buyer", "the seller"),
    ("parents", "children"),
    ("the police", "the citizens"),
    ("a man", "a woman"),
]


def agent_swap(q: str, _rng: random.Random) -> str | None:
    """Who does what to whom: swap two role nouns that both occur in the question."""
    low = q.lower()
    for x, y in _ACTORS:
        i, j = low.find(x), low.find(y)
        if i >= 0 and j >= 0:
            first, second = (x, y) if i < j else (y, x)
            a, b = min(i, j), max(i, j)
            return q[:a] + second + q[a + len(first) : b] + first + q[b + len(second) :]
    m = re.search(
        r"\b(\w+) (kill|beat|defeat|love|hate|marry|sue|pay|hire|follow|block)s? (\w+)\b", q
    )
    if m and m.group(1).lower() not in {
        "i",
        "you",
        "we",
        "they",
        "to",
        "does",
        "do",
        "can",
        "will",
        "would",
        "should",
        "did",
        "why",
        "who",
        "how",
    }:
        return q[: m.start()] + f"{m.group(3)} {m.group(2)} {m.group(1)}" + q[m.end() :]
    return None


# --- antonyms, negation, tense ----------------------------------------------------------------

#: The domain's antonym pairs (the gateway vetoes a swap of them) plus pairs too common to veto
#: ("good"/"bad", "old"/"new") that still make good hard negatives to train on.
_GENERATE_ONLY: list[tuple[str, str]] = [
    ("increasing", "decreasing"),
    ("cheapest", "most expensive"),
    ("gaining", "losing"),
    ("high", "low"),
    ("boy", "girl"),
    ("easy", "hard"),
    ("good", "bad"),
    ("fast", "slow"),
    ("old", "new"),
    ("long", "short"),
    ("safe", "dangerous"),
    ("healthy", "unhealthy"),
    ("weak", "strong"),
    ("heavy", "light"),
    ("cheap", "expensive"),
    ("fácil", "difícil"),
    ("caliente", "frío"),
    ("alto", "bajo"),
]
_ANTONYMS: list[tuple[str, str]] = [*ANTONYMS, *_GENERATE_ONLY]
_ANT_MAP: dict[str, str] = {}
for _x, _y in _ANTONYMS:
    _ANT_MAP.setdefault(_x, _y)
    _ANT_MAP.setdefault(_y, _x)
_ANT_RE = re.compile(
    r"\b(" + "|".join(sorted(map(re.escape, _ANT_MAP), key=len, reverse=True)) + r")\b", re.I
)


def antonym(q: str, _rng: random.Random) -> str | None:
    m = _ANT_RE.search(q)
    if not m:
        return None
    return q[: m.start()] + _cap_like(m.group(0), _ANT_MAP[m.group(0).lower()]) + q[m.end() :]


_NEGATIONS: list[tuple[str, str]] = [
    (r"\bcan't\b", "can"),
    (r"\bdon't\b", "do"),
    (r"\bdoesn't\b", "does"),
    (r"\bisn't\b", "is"),
    (r"\bshouldn't\b", "should"),
    (r"\bwon't\b", "will"),
    (r"\bnot\b ", ""),
    (r"\bno\b ", ""),
    (r"\bis\b", "is not"),
    (r"\bare\b", "are not"),
    (r"\bcan\b", "can't"),
    (r"\bshould\b", "shouldn't"),
    (r"\bdoes\b", "doesn't"),
    (r"\bdo\b", "don't"),
    (r"\bwill\b", "won't"),
    (r"\bwould\b", "wouldn't"),
    (r"\bwas\b", "wasn't"),
    (r"\bcould\b", "couldn't"),
    (r"\b(puedo|puede|es|está|hay|debo|debe|tengo|funciona|sirve)\b", r"no \1"),
]


def negate(q: str, _rng: random.Random) -> str | None:
    for pat, rep in _NEGATIONS:
        new, n = re.subn(pat, rep, q, count=1, flags=re.I)
        if n and norm(new) != norm(q):
            return _cap_like(q, new)
    return None


_TENSES: list[tuple[str, str]] = [
    (r"\bwill\b", "did"),
    (r"\bis\b", "was"),
    (r"\bare\b", "were"),
    (r"\bwas\b", "is"),
    (r"\bwere\b", "are"),
    (r"\bdid\b", "will"),
    (r"\bdoes\b", "did"),
    (r"\bhas\b", "had"),
]


def tense(q: str, _rng: random.Random) -> str | None:
    for pat, rep in _TENSES:
        new, n = re.subn(pat, rep, q, count=1, flags=re.I)
        if n and norm(new) != norm(q):
            return _cap_like(q, new)
    return None


# --- narrower / wider -------------------------------------------------------------------------

_QUALIFIERS = [
    "in India",
    "in the US",
    "for beginners",
    "without a degree",
    "for free",
    "in 2017",
    "for kids",
    "at home",
    "in the UK",
    "for a student",
    "after 30",
    "without experience",
    "on Android",
    "on an iPhone",
    "in one month",
    "for women",
    "in China",
    "online",
    "for a small business",
    "on Windows",
    "on a Mac",
    "during pregnancy",
    "in winter",
    "on a budget",
    "without a credit card",
    "as a foreigner",
    "for seniors",
    "at night",
    "in my car",
    "at work",
    "with diabetes",
    "for a dog",
    "in Spanish",
    "by train",
    "en España",
    "para principiantes",
    "sin experiencia",
    "gratis",
    "en casa",
    "en México",
]


def qualify(q: str, rng: random.Random) -> str | None:
    """A narrower question: the same question with a qualifier that changes the answer."""
    qual = rng.choice(_QUALIFIERS)
    if norm(qual) in norm(q):
        return None
    body = q.rstrip()
    end = ""
    while body and body[-1] in "?.!":
        end = body[-1] + end
        body = body[:-1]
    if not body:
        return None
    return f"{body} {qual}{end or '?'}"


def widen(q: str, _rng: random.Random) -> str | None:
    """A wider question: drop a trailing qualifier ("... in India?" -> "...?")."""
    m = re.search(
        r"\s+(in|for|on|at|without|with|after|before|during|under|en|para|sin|con)\s+"
        r"[\w$'.\- ]{2,30}?(?P<end>[?.!]*)\s*$",
        q,
        re.I,
    )
    if not m or m.start() < 12:
        return None
    return q[: m.start()] + (m["end"] or "?")


NEGATIVE_RULES: dict[str, Rule] = {
    "symbol": symbol,
    "number": number,
    "unit": unit,
    "ordinal": ordinal,
    "entity": entity,
    "role_swap": role_swap,
    "agent_swap": agent_swap,
    "antonym": antonym,
    "negation": negate,
    "tense": tense,
    "narrower": qualify,
    "wider": widen,
}


# --- wording-only paraphrases (positives) -----------------------------------------------------

_REWRITES: list[tuple[str, list[str]]] = [
    (
        r"^how (?:do|can) i (?P<x>.+?)\??$",
        [
            "How can I {x}?",
            "What is the way to {x}?",
            "What should I do to {x}?",
            "How would I {x}?",
            "how to {x}",
            "I want to know how to {x}.",
            "Tell me how to {x}.",
            "What are the steps to {x}?",
            "Any tips on how to {x}?",
        ],
    ),
    (
        r"^how to (?P<x>.+?)\??$",
        ["How do I {x}?", "How can I {x}?", "What is the way to {x}?", "Steps to {x}?"],
    ),
    (
        r"^what is the best way to (?P<x>.+?)\??$",
        ["How do I best {x}?", "What's the best way to {x}?", "Best way to {x}?"],
    ),
    (
        r"^what (?:is|are) the (?:advantages|benefits) of (?P<x>.+?)\??$",
        ["What are the benefits of {x}?", "Why is {x} good?", "What are the upsides of {x}?"],
    ),
    (
        r"^what is (?P<x>.+?)\??$",
        ["What's {x}?", "Can you tell me what {x} is?", "what is {x}", "Explain what {x} is."],
    ),
    (
        r"^what does (?P<x>.+?) mean\??$",
        ["What is the meaning of {x}?", "What is meant by {x}?", "Meaning of {x}?"],
    ),
    (
        r"^why (?P<x>(?:is|are|do|does|did) .+?)\??$",
        ["Why {x}?", "What is the reason {x2}?", "why {x}"],
    ),
    (
        r"^where can i (?P<x>.+?)\??$",
        ["Where is a good place to {x}?", "Where should I go to {x}?", "Where do I {x}?"],
    ),
    (
        r"^is it possible to (?P<x>.+?)\??$",
        ["Can I {x}?", "Can one {x}?", "Is there a way to {x}?"],
    ),
    (r"^can i (?P<x>.+?)\??$", ["Is it possible to {x}?", "Am I able to {x}?", "Is it OK to {x}?"]),
    (r"^which is the best (?P<x>.+?)\??$", ["What is the best {x}?", "Best {x}?"]),
    (r"^what are some (?P<x>.+?)\??$", ["What are {x}?", "Can you suggest {x}?", "Name some {x}."]),
]
_REWRITE_RES = [(re.compile(p, re.I), outs) for p, outs in _REWRITES]
_QUESTION_AUX = re.compile(r"^(is|are|do|does|did) (.+)$", re.I)


def rephrase(q: str, rng: random.Random) -> str | None:
    """A wording-only paraphrase of a question by question-form templates; else a surface
    variant (case, punctuation, contractions)."""
    text = q.strip()
    for pat, outs in _REWRITE_RES:
        m = pat.match(text)
        if not m:
            continue
        x = m["x"].strip()
        if len(x) < 3:
            return None
        out = rng.choice(outs)
        if "{x2}" in out:  # "why is X Y" -> "what is the reason X is Y" (best effort)
            am = _QUESTION_AUX.match(x)
            if not am or am.group(1).lower() not in ("is", "are"):
                continue
            words = am.group(2).split(" ", 1)
            if len(words) < 2:
                continue
            out = out.replace("{x2}", f"{words[0]} {am.group(1)} {words[1]}")
        return out.replace("{x}", x)
    variants = [
        text.lower().rstrip("?"),
        text.replace("What is", "What's").replace("do not", "don't").replace("I am", "I'm"),
        text.replace("What's", "What is").replace("don't", "do not").replace("I'm", "I am"),
    ]
    choice = rng.choice(variants)
    return choice if norm(choice) != norm(text) else None
