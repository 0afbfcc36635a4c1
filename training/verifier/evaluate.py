"""Evaluate calibrated verifiers on sets they were not fitted on; nothing is fitted here.

For each system (``new``: the shipped model and table; ``old``: a previous model and table
given by ``--old``) and each set:

- ``dev`` (``qqp_dev.jsonl``), cache mode as in calibration: labelled precision with its
  Wilson 95% interval and duplicate hit rate per precision target, and the curve over τ; the
  cosine-only curve beside it.
- ``val`` (the calibration split): the same curves (the table was fitted here).
- ``mrpc`` (``mrpc_test.jsonl``, MRPC rows held out of training and fitting), ``synonym``
  (``val_synonym.jsonl``: validation questions with a synonym training never saw, all
  paraphrases), ``gen`` (``tests/data/generalisation.jsonl``) and ``red``
  (``tests/data/red_team.jsonl``, a later probe of the same kinds written on 7 December and
  sharing no text with ``gen``), ``typed`` and ``typed_later`` (``tests/data/typed_probe*.jsonl``:
  queries as people type them, in lower case and often without a question mark; the first
  round was read before the verifier's question mark and the closed name classes were added,
  the later one written after them), pairwise: precision / recall over τ and what the default
  target serves, per kind of row.
- ``misses``: questions with no paraphrase cached. Every ``b`` of the four hand-written sets is
  asked of a cache holding every other row's ``a`` (its own ``a`` and texts identical to the
  query removed), as the gateway would: the table's top-k by cosine above its floor, each
  pair scored, the best served when it clears τ. Whatever is served is another question's
  answer. Counted per language and target; the default target's are listed for reading (a
  few are paraphrases across rows, most are not).

All curves of one system come from one run per set. Writes ``eval_report.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from deja.semantic.curves import wilson
from training.verifier.calibrate import (
    EVAL_TARGETS,
    SWEEP,
    PairSet,
    cache_curves,
    cached_embed,
    cosine_curves,
    pair_set,
    run_cache,
)
from training.verifier.calibration import (
    Decision,
    Verifier,
    cache_run,
    load_calibration,
    serve,
    tau_for_target,
)
from training.verifier.common import ARTIFACTS, CACHE, DATA, RUNS, read_json_rows, read_pairs
from training.verifier.embed import GEN, RED, TYPED, TYPED_LATER

#: The hand-written sets, asked of each other by ``misses``.
PAIR_SETS_HAND = (GEN, RED, TYPED, TYPED_LATER)
#: The pairwise sets: name -> (file, split name in the pair-set cache).
PAIR_SETS = {
    "mrpc": (CACHE / "mrpc_test.jsonl", "mrpc_test"),
    "synonym": (CACHE / "val_synonym.jsonl", "val_synonym"),
    "gen": (GEN, "generalisation"),
    "red": (RED, "red_team"),
    "typed": (TYPED, "typed_probe"),
    "typed_later": (TYPED_LATER, "typed_probe_later"),
}


def pair_curves(ps: PairSet, dec: Decision, tau_default: float | None) -> dict[str, Any]:
    sc = ps.scores(dec)
    n_pos = max(1, int(ps.y.sum()))

    def at(tau: float) -> dict[str, Any]:
        s = sc >= tau
        right = int((s & ps.y).sum())
        lo, hi = wilson(right, int(s.sum()), 1.96)
        return {
            "tau": tau,
            "served": int(s.sum()),
            "precision": right / int(s.sum()) if s.any() else float("nan"),
            "recall": right / n_pos,
            "interval": [round(lo, 4), round(hi, 4)],
        }

    def served_by(groups: list[str]) -> dict[str, Any]:
        """Rows and rows served at the default, per group (one per row of ``ps``)."""
        if tau_default is None:
            return {}
        keys, served = np.array(groups), sc >= tau_default
        return {
            g: {"rows": int((keys == g).sum()), "served": int(served[keys == g].sum())}
            for g in sorted(set(groups))
        }

    kinds = served_by(ps.kind)
    # each kind per language, where the rows name one (the generalisation set)
    by_lang = served_by([f"{k}/{g}" if g else "" for k, g in zip(ps.kind, ps.lang, strict=True)])
    langs = {group: counts for group, counts in by_lang.items() if group}
    return {
        "default": at(tau_default) if tau_default is not None else None,
        "curve": [at(t) for t in SWEEP],
        "by_kind": kinds,
        "by_kind_and_language": langs,
        "cosine_curve": [
            {**at_cos, "theta": th}
            for th in (0.7, 0.8, 0.85, 0.9, 0.92, 0.95, 0.97)
            for at_cos in [cos_at(ps, th)]
        ],
    }


def miss_traffic(
    model: Path, dec: Decision, doc: dict[str, Any], threads: int, default: float
) -> dict[str, Any]:
    """The ``misses`` set (module docstring): served per language and target, and the
    default target's hits. One cache run over the four sets with two candidates more than the
    table's k, of which the row's own ``a`` and texts identical to the query are dropped and
    the first k others kept; then the gateway's choice (:func:`serve`)."""
    rows = [pair for path in PAIR_SETS_HAND for pair in read_pairs(path)]
    langs = [str(row.get("lang", "")) for path in PAIR_SETS_HAND for row in read_json_rows(path)]
    k, floor = int(doc["k"]), float(doc["cosine_floor"])
    verifier = Verifier.load(model, model.parent / "tokenizer.json", threads=threads)
    embed = cached_embed(*(path.stem for path in PAIR_SETS_HAND))
    run = cache_run(rows, embed, verifier, k=k + 2, floor=floor)
    other = (run.cand >= 0) & (run.kind == 0)
    keep = other & (np.cumsum(other, axis=1) <= k)
    run = dataclasses.replace(
        run, cand=np.where(keep, run.cand, -1), cos=np.where(keep, run.cos, -np.inf)
    )
    sv = serve(run, dec, floor)
    idx = np.arange(run.n)
    slot = np.maximum(sv.slot, 0)
    lang_of = np.array(langs)
    names = sorted(set(langs))

    def served_at(target: float) -> np.ndarray:
        tau = tau_for_target(doc, target)
        return (sv.slot >= 0) & (sv.score >= (np.inf if tau is None else tau))

    at_default = served_at(default)
    return {
        "queries": {lang: int((lang_of == lang).sum()) for lang in names},
        "per_language": [
            {
                "target": t,
                "tau": tau_for_target(doc, t),
                "served": {lang: int((served_at(t) & (lang_of == lang)).sum()) for lang in names},
            }
            for t in EVAL_TARGETS
        ],
        "served_at_default": [
            {
                "lang": langs[i],
                "query": rows[i].b,
                "served_for": run.index_texts[int(run.cand[i, slot[i]])],
                "decision": round(float(sv.score[i]), 4),
                "cosine": round(float(run.cos[i, slot[i]]), 4),
                "logit": round(float(run.logit[i, slot[i]]), 3),
            }
            for i in idx[at_default]
        ],
    }


def cos_at(ps: PairSet, theta: float) -> dict[str, Any]:
    s = ps.cos >= theta
    right = int((s & ps.y).sum())
    lo, hi = wilson(right, int(s.sum()), 1.96)
    return {
        "served": int(s.sum()),
        "precision": right / int(s.sum()) if s.any() else float("nan"),
        "recall": right / max(1, int(ps.y.sum())),
        "interval": [round(lo, 4), round(hi, 4)],
    }


def evaluate(calibration: Path, sets: list[str], threads: int, default: float) -> dict[str, Any]:
    dec, doc = load_calibration(calibration)
    model = calibration.parent / doc["model_file"]
    k, floor = int(doc["k"]), float(doc["cosine_floor"])
    tau_default = tau_for_target(doc, default)
    out: dict[str, Any] = {"k": k, "floor": floor, "decision": dec.kind, "vetoes": dec.vetoes}
    for name in sets:
        cal_report = calibration_report(calibration)
        if name == "val" and cal_report is not None:  # measured once, by the calibration run
            out[name] = cal_report["val_eval"]
        elif name == "misses":
            out[name] = miss_traffic(model, dec, doc, threads, default)
        elif name in ("dev", "val"):
            path = DATA / "qqp_dev.jsonl" if name == "dev" else CACHE / "val.jsonl"
            run = run_cache(read_pairs(path), name, model, k, floor, threads)
            sv = serve(run, dec, floor, doc.get("skip_verification_above"))
            out[name] = {
                **cache_curves(run, sv, doc),
                "cosine": cosine_curves(run),
                "rows": run.n,
                "scored_pairs": run.scored_pairs,
            }
        else:
            path, split = PAIR_SETS[name]
            out[name] = pair_curves(pair_set(path, split, model, threads), dec, tau_default)
    return out


def calibration_report(calibration: Path) -> dict[str, Any] | None:
    """The calibration run's report when it belongs to this table (same model sha256)."""
    path = RUNS / "calibration_report.json"
    if not path.is_file():
        return None
    rep: dict[str, Any] = json.loads(path.read_text())
    doc = json.loads(calibration.read_text())
    return rep if rep.get("model_sha256") == doc.get("model_sha256") and "val_eval" in rep else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--calibration", type=Path, default=ARTIFACTS / "calibration.json")
    ap.add_argument("--old", type=Path, default=CACHE / "old" / "calibration.json")
    ap.add_argument(
        "--sets",
        nargs="+",
        choices=("dev", "val", "misses", *PAIR_SETS),
        default=["dev", "val", "mrpc", "synonym", "gen", "red", "typed", "typed_later", "misses"],
    )
    ap.add_argument("--systems", nargs="+", default=["new", "old"])
    ap.add_argument("--report", type=Path, default=RUNS / "eval_report.json")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--default-target", type=float, default=0.92)
    args = ap.parse_args(argv)
    # systems evaluated by an earlier call stay in the report (the old one needs no re-run)
    report: dict[str, Any] = json.loads(args.report.read_text()) if args.report.is_file() else {}
    for system in args.systems:
        cal = args.calibration if system == "new" else args.old
        if system != "new" and not cal.is_file():
            # the previous model is kept only on the machine that replaced it
            print(f"[evaluate] {system}: no table at {cal} (--old), skipped", flush=True)
            continue
        report.setdefault(system, {}).update(
            evaluate(cal, args.sets, args.threads, args.default_target)
        )
        for name in args.sets:
            part = report[system][name]
            if name == "misses":
                for p in part["per_language"]:
                    print(
                        f"[{system} misses] target {p['target']:.2f} tau {p['tau']} served "
                        f"{p['served']} of {part['queries']}",
                        flush=True,
                    )
            elif "per_target" in part:
                for p in part["per_target"]:
                    print(
                        f"[{system} {name}] target {p['target']:.2f} tau {p.get('tau')} "
                        f"precision {p.get('precision')} {p.get('interval')} "
                        f"hit_rate {p.get('hit_rate')} labelled {p.get('labelled')}",
                        flush=True,
                    )
            else:
                print(
                    f"[{system} {name}] default {part['default']} by kind {part['by_kind']}"
                    + (f" by language {langs}" if (langs := part["by_kind_and_language"]) else ""),
                    flush=True,
                )
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(report, indent=2, default=str))
    print(f"[evaluate] wrote {args.report}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
