"""Derive the noun classes that the neighbour check reads (``deja/models/lexicon/``) from
WordNet 3.0 (Debian's ``wordnet-base`` and ``wordnet-sense-index``)::

    apt-get install wordnet-base wordnet-sense-index
    python -m training.lexicon.wordnet            # writes deja/models/lexicon/noun_classes.json

For each English noun that people use mostly as a noun, the table keeps three sets of WordNet
synset offsets: every noun sense of the word (two words sharing one are synonyms in some
sense: "photo" / "picture"), the classes of its dominant senses (the hypernyms up to
:data:`LEVELS` steps above its first :data:`SENSES` senses that lie at least :data:`MIN_DEPTH`
steps below the root, so "kitchen appliance" counts and "object" does not), and the direct
hypernyms of every sense
(so a word never reads as a sister of its own class: "oven" / "kitchen appliance"); and
WordNet's irregular plurals of the listed nouns ("children" -> "child", "knives" -> "knife").
:mod:`deja.semantic.neighbours` calls two words *neighbours* when they share a class and
neither shares a sense with, nor is a class of, the other ("microwave" / "oven", "hotel" /
"restaurant", "calcium" / "sodium").

The WNDB files are read directly, not through ``nltk``: its reader refuses a corpus directory
outside its own data path and expects a ``lexnames`` file that Debian's package does not ship,
and the four files used here have a documented, line-per-record format (``wndb(5WN)``,
``senseidx(5WN)``). Standard library only; runs in a second.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "deja" / "models" / "lexicon" / "noun_classes.json"
#: How many of a word's senses (in WordNet's order: most frequent first) give its classes.
SENSES = 2
#: The least depth (shortest hypernym path to ``entity``) of a class: shallower ones
#: ("person", "object", "abstraction") hold too many unrelated words.
MIN_DEPTH = 5
#: How many hypernym steps up from a dominant sense a class may lie (1: direct hypernyms only;
#: 2 also joins "dog" and "cat" under "carnivore").
LEVELS = 2
#: Whole words of this vocabulary (the verifier's WordPiece vocabulary, 30,522 entries, common
#: words whole) vouch for a noun that WordNet's sense counts never saw: the counts come from
#: texts older than "laptop" and "smartphone".
VOCAB = REPO / "deja" / "models" / "verifier" / "tokenizer.json"
#: The WNDB files read.
FILES = ("index.noun", "data.noun", "index.sense", "noun.exc")
#: The sense-index ``ss_type`` digits: 1 noun, 2 verb, 3 adjective, 4 adverb, 5 satellite.
NOUN = "1"


def read_index(path: Path) -> dict[str, list[int]]:
    """``index.noun``: lemma -> its synset offsets in sense order."""
    out: dict[str, list[int]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith(" "):  # the licence header lines start with spaces
            continue
        f = line.split()
        n_synsets, n_pointers = int(f[2]), int(f[3])
        out[f[0]] = [int(x) for x in f[6 + n_pointers :][:n_synsets]]
    return out


def read_hypernyms(path: Path) -> dict[int, list[int]]:
    """``data.noun``: synset offset -> its hypernyms and instance hypernyms."""
    out: dict[int, list[int]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith(" "):
            continue
        f = line.split(" | ")[0].split()
        n_words = int(f[3], 16)
        at = 4 + 2 * n_words
        n_pointers = int(f[at])
        ups = []
        for p in range(n_pointers):
            symbol, offset, pos = f[at + 1 + 4 * p : at + 4 + 4 * p]
            if symbol in ("@", "@i") and pos == "n":
                ups.append(int(offset))
        out[int(f[0])] = ups
    return out


def read_counts(path: Path) -> dict[tuple[str, str], int]:
    """``index.sense``: (lemma, ss_type digit) -> tagged occurrences over its senses."""
    out: dict[tuple[str, str], int] = defaultdict(int)
    for line in path.read_text(encoding="utf-8").splitlines():
        key, _offset, _sense, count = line.split()
        lemma, rest = key.split("%", 1)
        pos = "3" if rest[0] == "5" else rest[0]
        out[(lemma, pos)] += int(count)
    return out


def read_exceptions(path: Path) -> dict[str, str]:
    """``noun.exc``: an irregular plural -> its first listed singular ("children" -> "child")."""
    out: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        form, *lemmas = line.split()
        if lemmas and form.isalpha():
            out[form] = lemmas[0]
    return out


def derive(root: Path, vocab: frozenset[str]) -> dict[str, list[list[int]]]:
    """word -> [its senses, its classes, every sense's hypernyms] (see the module doc)."""
    index = read_index(root / "index.noun")
    ups = read_hypernyms(root / "data.noun")
    counts = read_counts(root / "index.sense")

    @cache
    def depth(offset: int) -> int:
        parents = ups.get(offset, [])
        return 0 if not parents else 1 + min(depth(p) for p in parents)

    words: dict[str, list[list[int]]] = {}
    for lemma, senses in sorted(index.items()):
        if not lemma.isalpha() or len(lemma) < 3:
            continue
        as_noun = counts.get((lemma, NOUN), 0)
        other = [counts[(lemma, p)] for p in "234" if (lemma, p) in counts]
        if any(n >= as_noun for n in other) or (as_noun == 0 and (other or lemma not in vocab)):
            continue  # used mostly as a verb or an adjective ("work", "right"), or rare
        classes: set[int] = set()
        frontier = set(senses[:SENSES])
        for _ in range(LEVELS):
            frontier = {h for s in frontier for h in ups.get(s, [])}
            classes |= {h for h in frontier if depth(h) >= MIN_DEPTH}
        if classes:
            above = {h for s in senses for h in ups.get(s, [])}
            words[lemma] = [sorted(senses), sorted(classes), sorted(above)]
    return words


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--wordnet", type=Path, default=Path("/usr/share/wordnet"), help="WNDB folder")
    ap.add_argument("--vocab", type=Path, default=VOCAB, help="tokenizer.json of common words")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    missing = [n for n in FILES if not (args.wordnet / n).is_file()]
    if missing:
        print(
            f"--wordnet {args.wordnet}: no {', '.join(missing)} there "
            "(apt-get install wordnet-base wordnet-sense-index)",
            file=sys.stderr,
        )
        return 2
    vocab = frozenset(json.loads(args.vocab.read_text(encoding="utf-8"))["model"]["vocab"])
    words = derive(args.wordnet, vocab)
    plurals = {
        form: lemma
        for form, lemma in read_exceptions(args.wordnet / "noun.exc").items()
        if lemma in words
    }
    table = {
        "source": "WordNet 3.0 (Princeton University; WordNet 3.0 licence), Debian wordnet-base",
        "derived_by": "python -m training.lexicon.wordnet",
        "senses": SENSES,
        "min_depth": MIN_DEPTH,
        "levels": LEVELS,
        "vocabulary": "the words of deja/models/verifier/tokenizer.json (bert-base-uncased)",
        "words": words,
        "plurals": plurals,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(table, separators=(",", ":"), sort_keys=True) + "\n", encoding="utf-8"
    )
    print(f"[wordnet] {len(words):,} nouns -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
