"""Data prep: validate qqp_train, carve a validation split with no question text shared with
training, and augment training with reversed pairs, identity pairs and rule-made hard
negatives (role swaps, negations, tense changes, antonym swaps, added qualifiers).

Outputs (under ``--out``): ``train.jsonl`` (augmented, shuffled), ``val.jsonl``,
``prep_stats.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from training.verifier.common import CACHE, DATA, SEED, Pair, read_pairs, write_pairs


def norm(text: str) -> str:
    """Key for the overlap check: case- and whitespace-insensitive."""
    return " ".join(text.lower().split())


# --- rule-made hard negatives ------------------------------------------------------------

_ROLE_PATTERNS = [
    # "X better than Y" / "X vs Y" / "from X to Y" / "X or Y" / "between X and Y"
    re.compile(
        r"\b(?P<x>\w[\w+#.\- ]{0,30}?) (?P<op>better than|worse than|bigger than|"
        r"smaller than|faster than|slower than|cheaper than|more expensive than|"
        r"harder than|easier than|vs\.?|versus) (?P<y>\w[\w+#.\- ]{0,30}?)(?P<end>[?.,]|$)",
        re.IGNORECASE,
    ),
    re.compile(
        r"\bfrom (?P<x>\w[\w+#.\- ]{0,30}?) (?P<op>to) (?P<y>\w[\w+#.\- ]{0,30}?)"
        r"(?P<end>[?.,]| in | for | with |$)",
        re.IGNORECASE,
    ),
    re.compile(
        r"\bbetween (?P<x>\w[\w+#.\- ]{0,30}?) (?P<op>and) (?P<y>\w[\w+#.\- ]{0,30}?)"
        r"(?P<end>[?.,]|$)",
        re.IGNORECASE,
    ),
]


def role_swap(q: str) -> str | None:
    for pat in _ROLE_PATTERNS:
        m = pat.search(q)
        if m and norm(m["x"]) != norm(m["y"]):
            if pat is _ROLE_PATTERNS[2]:
                # "between X and Y" is symmetric in meaning: swap into the first operand
                continue
            x, y = m["x"], m["y"]
            prefix = q[: m.start()]
            rep = m.group(0).replace(x, "\0", 1)
            rep = rep.replace(y, x, 1).replace("\0", y, 1)
            return prefix + rep + q[m.end() :]
    return None


_NEGATIONS: list[tuple[str, str]] = [
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
    (r"\bcan't\b", "can"),
    (r"\bdon't\b", "do"),
    (r"\bdoesn't\b", "does"),
    (r"\bisn't\b", "is"),
    (r"\bshouldn't\b", "should"),
    (r"\bwon't\b", "will"),
    (r"\bnot\b ", ""),
]


def negate(q: str) -> str | None:
    for pat, rep in _NEGATIONS:
        new, n = re.subn(pat, rep, q, count=1, flags=re.IGNORECASE)
        if n and norm(new) != norm(q):
            return new[0].upper() + new[1:] if new and q[:1].isupper() else new
    return None


_TENSES: list[tuple[str, str]] = [
    (r"\bwill\b", "did"),
    (r"\bis\b", "was"),
    (r"\bare\b", "were"),
    (r"\bwas\b", "is"),
    (r"\bwere\b", "are"),
    (r"\bdid\b", "will"),
    (r"\bdoes\b", "did"),
    (r"\bdo\b", "did"),
    (r"\bhas\b", "had"),
    (r"\bhave\b", "had"),
]


def tense(q: str) -> str | None:
    for pat, rep in _TENSES:
        new, n = re.subn(pat, rep, q, count=1, flags=re.IGNORECASE)
        if n and norm(new) != norm(q):
            return new[0].upper() + new[1:] if q[:1].isupper() else new
    return None


_ANTONYMS: list[tuple[str, str]] = [
    ("ascending", "descending"),
    ("before", "after"),
    ("minimum", "maximum"),
    ("min", "max"),
    ("increase", "decrease"),
    ("increasing", "decreasing"),
    ("best", "worst"),
    ("better", "worse"),
    ("advantages", "disadvantages"),
    ("pros", "cons"),
    ("buy", "sell"),
    ("buying", "selling"),
    ("cheapest", "most expensive"),
    ("gain", "lose"),
    ("gaining", "losing"),
    ("start", "stop"),
    ("first", "last"),
    ("highest", "lowest"),
    ("high", "low"),
    ("largest", "smallest"),
    ("more", "less"),
    ("positive", "negative"),
    ("legal", "illegal"),
    ("male", "female"),
    ("men", "women"),
    ("boy", "girl"),
    ("import", "export"),
    ("upload", "download"),
    ("easy", "hard"),
    ("love", "hate"),
    ("good", "bad"),
    ("rich", "poor"),
    ("fast", "slow"),
    ("old", "new"),
    ("open", "close"),
    ("north", "south"),
    ("east", "west"),
    ("win", "lose"),
    ("early", "late"),
    ("inside", "outside"),
    ("online", "offline"),
    ("hot", "cold"),
    ("long", "short"),
]
_ANT_MAP: dict[str, str] = {}
for _x, _y in _ANTONYMS:
    _ANT_MAP.setdefault(_x, _y)
    _ANT_MAP.setdefault(_y, _x)
_ANT_RE = re.compile(
    r"\b(" + "|".join(sorted(map(re.escape, _ANT_MAP), key=len, reverse=True)) + r")\b",
    re.IGNORECASE,
)


def antonym(q: str) -> str | None:
    m = _ANT_RE.search(q)
    if not m:
        return None
    word = m.group(0)
    rep = _ANT_MAP[word.lower()]
    if word[:1].isupper():
        rep = rep[:1].upper() + rep[1:]
    return q[: m.start()] + rep + q[m.end() :]


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
]


def qualify(q: str, rng: random.Random) -> str | None:
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


RULES: dict[str, Callable[[str, random.Random], str | None]] = {
    "role_swap": lambda q, _r: role_swap(q),
    "negation": lambda q, _r: negate(q),
    "tense": lambda q, _r: tense(q),
    "antonym": lambda q, _r: antonym(q),
    "qualifier": qualify,
}


# --- split + augmentation -------------------------------------------------------------------


def split(
    rows: list[Pair], val_rows: int, rng: random.Random
) -> tuple[list[Pair], list[Pair], int]:
    """Random ``val_rows`` rows for validation; training rows sharing any (normalised)
    question text with validation are dropped. Returns (train, val, dropped)."""
    idx = list(range(len(rows)))
    rng.shuffle(idx)
    val = [rows[i] for i in idx[:val_rows]]
    val_texts = {norm(p.a) for p in val} | {norm(p.b) for p in val}
    train: list[Pair] = []
    dropped = 0
    for i in idx[val_rows:]:
        p = rows[i]
        if norm(p.a) in val_texts or norm(p.b) in val_texts:
            dropped += 1
        else:
            train.append(p)
    return train, val, dropped


def augment(
    train: list[Pair],
    rng: random.Random,
    reverse_frac: float,
    identity_frac: float,
    hardneg_frac: float,
) -> tuple[list[Pair], Counter[str]]:
    """Extra rows: reversed pairs, identity pairs and rule-made hard negatives."""
    n = len(train)
    stats: Counter[str] = Counter()
    extra: list[Pair] = []
    for p in rng.sample(train, int(n * reverse_frac)):
        extra.append(Pair(p.b, p.a, p.duplicate))
        stats["reversed"] += 1
    for p in rng.sample(train, int(n * identity_frac)):
        q = p.a if rng.random() < 0.5 else p.b
        extra.append(Pair(q, q, True))
        stats["identity"] += 1
    want = int(n * hardneg_frac)
    names = list(RULES)
    per_rule = want // len(names)
    order = list(range(n))
    for name in names:
        rng.shuffle(order)
        made = 0
        for i in order:
            if made >= per_rule:
                break
            p = train[i]
            # anchor: the original question; the other side: the rewritten paraphrase (when
            # the pair is a duplicate, so the negative is a paraphrase with a changed meaning)
            # or the rewritten anchor itself
            src = p.b if (p.duplicate and rng.random() < 0.5) else p.a
            new = RULES[name](src, rng)
            if new is None or norm(new) == norm(src):
                continue
            a, b = (p.a, new) if rng.random() < 0.5 else (new, p.a)
            extra.append(Pair(a, b, False))
            made += 1
        stats[f"hardneg_{name}"] = made
    out = train + extra
    rng.shuffle(out)
    return out, stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--input", type=Path, default=DATA / "qqp_train.jsonl.gz")
    ap.add_argument("--out", type=Path, default=CACHE)
    ap.add_argument("--val-rows", type=int, default=6000)
    ap.add_argument("--reverse-frac", type=float, default=0.05)
    ap.add_argument("--identity-frac", type=float, default=0.01)
    ap.add_argument("--hardneg-frac", type=float, default=0.08)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--examples", type=int, default=2, help="print N examples per rule")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    rows = read_pairs(args.input)
    print(f"[prep] read {len(rows)} rows from {args.input}", flush=True)
    train, val, dropped = split(rows, args.val_rows, rng)
    print(
        f"[prep] val {len(val)} rows, train {len(train)} rows "
        f"({dropped} dropped for sharing a question with val)",
        flush=True,
    )
    aug, stats = augment(train, rng, args.reverse_frac, args.identity_frac, args.hardneg_frac)
    n_extra = len(aug) - len(train)
    print(
        f"[prep] augmented: +{n_extra} rows ({100 * n_extra / len(aug):.1f}% of "
        f"{len(aug)}): {dict(stats)}",
        flush=True,
    )
    if args.examples:
        ex_rng = random.Random(args.seed)
        for name, rule in RULES.items():
            shown = 0
            for p in train[:2000]:
                new = rule(p.a, ex_rng)
                if new:
                    print(f"  {name}: {p.a!r} -> {new!r}")
                    shown += 1
                    if shown >= args.examples:
                        break
    write_pairs(args.out / "train.jsonl", aug)
    write_pairs(args.out / "val.jsonl", val)
    summary = {
        "input_rows": len(rows),
        "val_rows": len(val),
        "val_duplicates": sum(p.duplicate for p in val),
        "train_rows": len(train),
        "train_dropped_overlap": dropped,
        "train_augmented_rows": len(aug),
        "augmentation": dict(stats),
        "augmentation_share": n_extra / len(aug),
        "seed": args.seed,
    }
    (args.out / "prep_stats.json").write_text(json.dumps(summary, indent=2))
    print(f"[prep] wrote {args.out}/train.jsonl, val.jsonl, prep_stats.json", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
