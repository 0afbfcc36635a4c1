"""Data prep: the training mix and the held-out splits, with no text shared between them.

Sources
- ``qqp_train.jsonl.gz`` (Quora, non-commercial): 6,000 random rows become the validation
  split (``val.jsonl``, cache-mode calibration); training rows sharing a question text with it
  are dropped.
- ``paraphrase_extra.jsonl.gz`` (MRPC and SemEval STS, research use): MRPC is split three ways
  (train / ``mrpc_val`` for fitting the decision / ``mrpc_test`` for the reported figure), STS
  two ways (train / val). STS grades map to labels as: score >= 4 ("mostly equivalent, only
  unimportant details differ") -> duplicate; score <= 3 ("roughly equivalent but important
  information differs" and below: another answer is needed) -> not duplicate; 3 < score < 4 is
  dropped as ambiguous.
- Rule-made rows (:mod:`training.verifier.families`) from the training split's own questions:
  hard negatives for each family and wording-only paraphrases; templated EN/ES everyday rows
  (:mod:`training.verifier.templates`). The same rules applied to the VALIDATION questions give
  ``val_extra.jsonl``, so the decision is fitted on rule-made rows of text training never saw.
- Synonym rows (:mod:`training.verifier.synonyms`): paraphrases that swap a word for a
  synonym (English on training questions, Spanish on the templates' forms), and the same
  paraphrases with a family's meaning change (negatives). The shipped model trained on
  ``train_synonyms.jsonl``, which holds them. Four of five synonym groups may be used for
  training; the fifth always makes ``val_synonym.jsonl`` from the validation questions.

Outputs (under ``--out``): ``train.jsonl`` (shuffled, no synonym rows), ``train_synonyms.jsonl``
(the same rows and the synonym rows; not written with ``--synonyms 0``), ``val.jsonl``,
``val_extra.jsonl``, ``val_synonym.jsonl``, ``mrpc_test.jsonl`` (each row with a ``kind``),
``prep_stats.json``. Asserts that no normalised text of a held-out file occurs in training.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from training.verifier.common import CACHE, DATA, SEED, Pair, read_pairs, write_json_rows
from training.verifier.families import NEGATIVE_RULES, norm, rephrase
from training.verifier.synonyms import (
    HELD_EN,
    TRAIN_EN,
    TRAIN_ES,
    contrast_rows,
    slot_rows,
    synonym_rows,
)
from training.verifier.templates import spanish_slots, template_pairs

Row = tuple[Pair, str]  # (pair, kind)
#: The families whose meaning changes are also applied on top of a synonym paraphrase.
CONTRAST_FAMILIES = ("antonym", "negation", "narrower", "wider", "entity", "number")


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


def read_extra(path: Path) -> tuple[list[Row], list[Row], Counter[str]]:
    """(MRPC rows, STS rows mapped to labels), and counts of what was kept and dropped."""
    mrpc: list[Row] = []
    sts: list[Row] = []
    stats: Counter[str] = Counter()
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            d: dict[str, Any] = json.loads(line)
            if d["source"] == "mrpc":
                mrpc.append((Pair(d["a"], d["b"], bool(d["duplicate"])), "mrpc"))
                continue
            s = float(d["score"])
            if 3.0 < s < 4.0:
                stats["sts_dropped_3_to_4"] += 1
                continue
            sts.append((Pair(d["a"], d["b"], s >= 4.0), "sts"))
            stats["sts_pos" if s >= 4.0 else "sts_neg"] += 1
    return mrpc, sts, stats


def disjoint_parts(rows: list[Row], sizes: list[int], rng: random.Random) -> list[list[Row]]:
    """Cut shuffled rows into parts of ``sizes`` (the rest last); a later part drops rows
    sharing a text with an earlier one."""
    rows = rows[:]
    rng.shuffle(rows)
    parts: list[list[Row]] = []
    taken: set[str] = set()
    pos = 0
    for size in [*sizes, len(rows)]:
        part: list[Row] = []
        while pos < len(rows) and len(part) < size:
            p = rows[pos][0]
            pos += 1
            if norm(p.a) in taken or norm(p.b) in taken:
                continue
            part.append(rows[pos - 1])
        taken |= {norm(r[0].a) for r in part} | {norm(r[0].b) for r in part}
        parts.append(part)
    return parts


def family_rows(
    questions: list[str], rng: random.Random, per_rule: int, positives: int
) -> tuple[list[Row], Counter[str]]:
    """Hard negatives (up to ``per_rule`` per family) and ``positives`` rephrasings."""
    out: list[Row] = []
    stats: Counter[str] = Counter()
    order = list(range(len(questions)))
    for name, rule in NEGATIVE_RULES.items():
        rng.shuffle(order)
        cap = per_rule // 3 if name == "tense" else per_rule  # tense often keeps the meaning
        for i in order:
            if stats[name] >= cap:
                break
            src = questions[i]
            new = rule(src, rng)
            if new is None or norm(new) == norm(src):
                continue
            a, b = (src, new) if rng.random() < 0.5 else (new, src)
            out.append((Pair(a, b, False), name))
            stats[name] += 1
    rng.shuffle(order)
    for i in order:
        if stats["rephrase"] >= positives:
            break
        new = rephrase(questions[i], rng)
        if new and norm(new) != norm(questions[i]):
            out.append((Pair(questions[i], new, True), "rephrase"))
            stats["rephrase"] += 1
    return out, stats


def write_rows(path: Path, rows: list[Row]) -> None:
    write_json_rows(
        path, ({"a": p.a, "b": p.b, "duplicate": p.duplicate, "kind": k} for p, k in rows)
    )


def texts_of(rows: list[Row]) -> set[str]:
    return {norm(p.a) for p, _ in rows} | {norm(p.b) for p, _ in rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--input", type=Path, default=DATA / "qqp_train.jsonl.gz")
    ap.add_argument("--extra", type=Path, default=DATA / "paraphrase_extra.jsonl.gz")
    ap.add_argument("--out", type=Path, default=CACHE)
    ap.add_argument("--val-rows", type=int, default=6000)
    ap.add_argument("--mrpc-test", type=int, default=1200)
    ap.add_argument("--mrpc-val", type=int, default=600)
    ap.add_argument("--sts-val", type=int, default=1200)
    ap.add_argument("--per-rule", type=int, default=1100)
    ap.add_argument("--positives", type=int, default=4000)
    ap.add_argument("--templates", type=int, default=4000)
    # the defaults rebuild the shipped model's train_synonyms.jsonl
    ap.add_argument("--synonyms", type=int, default=4000, help="English synonym paraphrases")
    ap.add_argument("--synonyms-es", type=int, default=1500, help="Spanish synonym paraphrases")
    ap.add_argument(
        "--contrasts", type=int, default=2000, help="synonym paraphrases with a meaning change"
    )
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    rows = read_pairs(args.input)
    train, val, dropped = split(rows, args.val_rows, rng)
    print(f"[prep] qqp: val {len(val)}, train {len(train)} ({dropped} dropped)", flush=True)
    mrpc, sts, stats = read_extra(args.extra)
    mrpc_test, mrpc_val, mrpc_train = disjoint_parts(mrpc, [args.mrpc_test, args.mrpc_val], rng)
    sts_val, sts_train = disjoint_parts(sts, [args.sts_val], rng)
    held_texts = texts_of([(p, "qqp") for p in val]) | texts_of(mrpc_test) | texts_of(mrpc_val)
    held_texts |= texts_of(sts_val)
    # drop extra-training rows that share a text with any held-out row
    mrpc_train = [r for r in mrpc_train if not texts_of([r]) & held_texts]
    sts_train = [r for r in sts_train if not texts_of([r]) & held_texts]

    train_q = list(dict.fromkeys([p.a for p in train] + [p.b for p in train]))
    fam_train, fam_stats = family_rows(train_q, rng, args.per_rule, args.positives)
    val_q = list(dict.fromkeys([p.a for p in val] + [p.b for p in val]))
    fam_val, fam_val_stats = family_rows(val_q, random.Random(args.seed + 1), 150, 600)
    tpl = template_pairs(random.Random(args.seed + 2), args.templates)
    syn = synonym_rows(train_q, random.Random(args.seed + 3), args.synonyms, TRAIN_EN, "synonym_en")
    syn += slot_rows(
        spanish_slots(), random.Random(args.seed + 4), args.synonyms_es, TRAIN_ES, "synonym_es"
    )
    contrast_rules = {name: NEGATIVE_RULES[name] for name in CONTRAST_FAMILIES}
    syn += contrast_rows(
        train_q, random.Random(args.seed + 6), args.contrasts, TRAIN_EN, contrast_rules
    )
    # held-out synonyms on validation questions: synonyms and text training never saw
    val_syn = synonym_rows(val_q, random.Random(args.seed + 5), 600, HELD_EN, "synonym_en")

    reversed_rows = [(Pair(p.b, p.a, p.duplicate), "qqp_reversed") for p in rng.sample(train, 2500)]
    identity = [(Pair(q, q, True), "identity") for q in rng.sample(train_q, 500)]
    mix: list[Row] = [(p, "qqp") for p in train] + reversed_rows + identity
    mix += mrpc_train + sts_train + fam_train + tpl
    # rows made from a training question can never contain held-out text, but check anyway
    mix = [r for r in mix if not texts_of([r]) & held_texts]
    # train_synonyms.jsonl: the same rows and the synonym rows, shuffled from the same state
    third = mix + [r for r in syn if not texts_of([r]) & held_texts]
    third_rng = random.Random()
    third_rng.setstate(rng.getstate())
    third_rng.shuffle(third)
    rng.shuffle(mix)
    train_texts = texts_of(third)
    # a rewritten validation question can happen to equal a training text: drop those rows
    fam_val = [r for r in fam_val if not texts_of([r]) & train_texts]
    val_syn = [r for r in val_syn if not texts_of([r]) & train_texts]
    val_extra = mrpc_val + sts_val + fam_val
    assert not train_texts & held_texts, "training shares text with a held-out split"
    assert not train_texts & texts_of(val_extra), "training shares text with val_extra"
    assert not train_texts & texts_of(val_syn), "training shares text with val_synonym"

    write_rows(args.out / "train.jsonl", mix)
    if syn:
        write_rows(args.out / "train_synonyms.jsonl", third)
    write_rows(args.out / "val.jsonl", [(p, "qqp") for p in val])
    write_rows(args.out / "val_extra.jsonl", val_extra)
    write_rows(args.out / "mrpc_test.jsonl", mrpc_test)
    write_rows(args.out / "val_synonym.jsonl", val_syn)
    kinds = Counter(k for _, k in mix)
    summary = {
        "input_rows": len(rows),
        "val_rows": len(val),
        "val_duplicates": sum(p.duplicate for p in val),
        "qqp_train_rows": len(train),
        "qqp_train_dropped_overlap": dropped,
        "train_rows": len(mix),
        "train_kinds": dict(kinds),
        "train_synonyms_rows": len(third) if syn else 0,
        "synonym_kinds": dict(Counter(k for _, k in third if k.startswith("synonym_"))),
        "extra": dict(stats),
        "mrpc": {"train": len(mrpc_train), "val": len(mrpc_val), "test": len(mrpc_test)},
        "sts": {"train": len(sts_train), "val": len(sts_val)},
        "families_train": dict(fam_stats),
        "families_val": dict(fam_val_stats),
        "val_extra_rows": len(val_extra),
        "val_synonym_rows": len(val_syn),
        "sts_mapping": "score >= 4 -> duplicate, score <= 3 -> not, 3 < score < 4 dropped",
        "text_overlap_train_heldout": 0,
        "seed": args.seed,
    }
    (args.out / "prep_stats.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=1), flush=True)
    ex = random.Random(7)
    for name in [*NEGATIVE_RULES, "rephrase"]:
        sample = [r for r in fam_train if r[1] == name]
        for p, _ in ex.sample(sample, min(2, len(sample))):
            print(f"  {name}: {p.a!r} | {p.b!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
