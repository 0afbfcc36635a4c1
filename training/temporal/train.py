"""Train and evaluate the embedding classifier of volatile (time-dependent) questions.

L2-regularised logistic regression, in numpy, on the unit 384-d query embeddings of the runtime
embedder (all-MiniLM-L6-v2, "dynint8" variant). Only the ``train`` split of ``questions.jsonl``
is used to fit, to choose the regulariser (stratified k-fold cross-validation) and to choose the
threshold (on out-of-fold scores, for high precision). The ``test`` split and the shared dev set
are only scored. Three detectors are reported: the rules of ``deja.temporal.rules`` alone, the
classifier alone, and rules OR classifier (the runtime decision). Unlabelled Quora questions
(``qqp_dev.jsonl``, nearly all timeless) show how much ordinary English traffic each detector
would bypass. ``--background`` (opt-in) also trains on rules-unflagged Quora questions as timeless
rows and calibrates the threshold on others.

Runtime contract of the written ``classifier.json``: for the query's unit embedding ``v``,
the question is volatile when ``sigmoid(weights . v + bias) >= threshold``.

    PYTHONPATH=. python training/temporal/train.py            # fit, evaluate, write the model
    PYTHONPATH=. python training/temporal/train.py --no-write # evaluate only
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from deja.files import file_sha256
from deja.semantic.auc import auc

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DEFAULT_DATA = HERE / "questions.jsonl"
DEFAULT_DEV = REPO.parent / "shared" / "data" / "temporal_dev.jsonl"
DEFAULT_OUT = REPO / "deja" / "models" / "temporal" / "classifier.json"
DEFAULT_CACHE = HERE / ".cache"
DEFAULT_BACKGROUND = REPO.parent / "shared" / "data" / "qqp_train.jsonl.gz"
DEFAULT_BACKGROUND_EVAL = REPO.parent / "shared" / "data" / "qqp_dev.jsonl"
LAMBDAS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)

Array = NDArray[np.float64]
Mask = NDArray[np.bool_]


# --- data ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    query: str
    volatile: bool
    lang: str
    category: str
    split: str


class DataError(ValueError):
    """The dataset file is malformed; the message lists every bad line."""


def load_questions(path: Path) -> list[Row]:
    """Parse and validate ``questions.jsonl``; raise :class:`DataError` naming each bad line."""
    errors: list[str] = []
    rows: list[Row] = []
    seen: dict[str, int] = {}
    fields: dict[str, type] = {
        "query": str,
        "volatile": bool,
        "lang": str,
        "category": str,
        "split": str,
    }
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            errors.append(f"{where}: not JSON ({exc.msg})")
            continue
        if not isinstance(obj, dict):
            errors.append(f"{where}: expected an object, got {type(obj).__name__}")
            continue
        bad = False
        for name, kind in fields.items():
            if name not in obj:
                errors.append(f"{where}: missing field {name!r}")
                bad = True
            elif not isinstance(obj[name], kind):
                errors.append(f"{where}: {name!r} must be {kind.__name__}, got {obj[name]!r}")
                bad = True
        extra = sorted(set(obj) - set(fields))
        if extra:
            errors.append(f"{where}: unknown fields {extra}")
            bad = True
        if bad:
            continue
        if not obj["query"].strip():
            errors.append(f"{where}: empty query")
            bad = True
        if obj["lang"] not in ("en", "es"):
            errors.append(f"{where}: lang must be 'en' or 'es', got {obj['lang']!r}")
            bad = True
        if obj["split"] not in ("train", "test"):
            errors.append(f"{where}: split must be 'train' or 'test', got {obj['split']!r}")
            bad = True
        if bad:
            continue
        key = obj["query"].strip().lower()
        if key in seen:
            errors.append(f"{where}: duplicate of line {seen[key]}: {obj['query']!r}")
            continue
        seen[key] = number
        rows.append(Row(**obj))
    if errors:
        raise DataError("\n".join(errors))
    if not rows:
        raise DataError(f"{path}: no rows")
    return rows


def load_dev(path: Path) -> list[Row]:
    """The shared dev set: ``{"query", "volatile"}`` per line (lang guessed, category 'dev')."""
    rows: list[Row] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            query, volatile = obj["query"], obj["volatile"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise DataError(f"{path}:{number}: bad dev row ({exc})") from exc
        lang = "es" if any(c in query for c in "¿¡áéíóúñ") else "en"
        rows.append(Row(query, bool(volatile), lang, "dev", "dev"))
    return rows


def load_pair_questions(path: Path) -> list[str]:
    """The distinct question texts of a Quora-pairs file (``{"a", "b", ...}`` per line)."""
    opener = gzip.open if path.suffix == ".gz" else open
    texts: set[str] = set()
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                obj = json.loads(line)
                texts.update(t.strip() for t in (obj.get("a"), obj.get("b")) if isinstance(t, str))
    return sorted(t for t in texts if 8 <= len(t) <= 300)


# --- embeddings ---------------------------------------------------------------------------------


def embed_all(texts: Sequence[str], cache_dir: Path) -> tuple[Array, str]:
    """Unit embeddings of ``texts`` from the runtime embedder, cached on disk by the vectors'
    id (model and derivation recipe: a new recipe must not reuse old vectors)."""
    from deja.embedding.onnx.embedder import load_onnx_embedder

    cache_dir.mkdir(parents=True, exist_ok=True)
    embedder = load_onnx_embedder(cache_dir, variant="dynint8")
    model_id = embedder.model_id
    cache_file = cache_dir / f"vectors-{embedder.vectors_id}.json"
    cache: dict[str, list[float]] = {}
    if cache_file.exists():
        cache = json.loads(cache_file.read_text())
    missing = sorted({t for t in texts if t not in cache})
    if missing:
        for text, vector in zip(missing, embedder.embed_batch(missing), strict=True):
            cache[text] = vector
        cache_file.write_text(json.dumps(cache))
    return np.array([cache[t] for t in texts], dtype=np.float64), model_id


# --- logistic regression ------------------------------------------------------------------------


def sigmoid(z: Array) -> Array:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -40.0, 40.0)))


def fit_logreg(
    x: Array, y: Array, lam: float, sample_weight: Array | None = None, iters: int = 50
) -> tuple[Array, float]:
    """Minimise the (weighted) mean log-loss + lam/2 * |w|^2 (bias not penalised) by Newton's
    method."""
    n, d = x.shape
    s = np.ones(n) if sample_weight is None else sample_weight
    total = float(s.sum())
    xb = np.hstack([x, np.ones((n, 1))])
    theta = np.zeros(d + 1)
    penalty = np.full(d + 1, lam)
    penalty[-1] = 0.0
    for _ in range(iters):
        p = sigmoid(xb @ theta)
        grad = xb.T @ (s * (p - y)) / total + penalty * theta
        hess = (xb.T * (s * p * (1 - p))) @ xb / total + np.diag(penalty) + 1e-9 * np.eye(d + 1)
        step = np.linalg.solve(hess, grad)
        theta -= step
        if float(np.max(np.abs(step))) < 1e-8:
            break
    return theta[:-1], float(theta[-1])


def log_loss(p: Array, y: Array) -> float:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def stratified_folds(strata: Sequence[str], k: int, seed: int) -> list[NDArray[np.int64]]:
    """k disjoint index arrays, each stratum dealt round-robin after a seeded shuffle."""
    rng = np.random.default_rng(seed)
    folds: list[list[int]] = [[] for _ in range(k)]
    offset = 0
    for stratum in sorted(set(strata)):
        idx = np.array([i for i, s in enumerate(strata) if s == stratum])
        rng.shuffle(idx)
        for j, i in enumerate(idx):
            folds[(j + offset) % k].append(int(i))
        offset += len(idx)
    return [np.array(sorted(f), dtype=np.int64) for f in folds]


def with_background(x: Array, y: Array, background: Array, weight: float) -> tuple[Array, ...]:
    """Append timeless background rows (label 0, weight ``weight``) to a training set."""
    xs = np.vstack([x, background]) if len(background) else x
    ys = np.concatenate([y, np.zeros(len(background))])
    ws = np.concatenate([np.ones(len(y)), np.full(len(background), weight)])
    return xs, ys, ws


def out_of_fold(
    x: Array,
    y: Array,
    folds: list[NDArray[np.int64]],
    lam: float,
    background: Array,
    background_weight: float,
) -> Array:
    """Out-of-fold scores of the labelled rows; the background joins every training fold."""
    scores = np.zeros(len(y))
    for fold in folds:
        mask = np.ones(len(y), dtype=bool)
        mask[fold] = False
        xs, ys, ws = with_background(x[mask], y[mask], background, background_weight)
        w, b = fit_logreg(xs, ys, lam, ws)
        scores[fold] = sigmoid(x[fold] @ w + b)
    return scores


THRESHOLDS = np.round(
    np.concatenate([np.arange(0.5, 0.95, 0.01), np.arange(0.95, 0.9995, 0.0025)]), 4
)


def choose_threshold(
    scores: Array,
    y: Array,
    langs: Sequence[str],
    rule_hits: Mask,
    max_added_fp: float,
    min_precision: float,
    calib_scores: Array,
    max_background_rate: float,
) -> float:
    """The lowest threshold (>= 0.5) at which the classifier, on out-of-fold scores, adds at most
    ``max_added_fp`` false bypasses (share of timeless rows the rules let through) in every
    language on its own (each language is judged apart), keeps precision >= ``min_precision``
    over all rows, and flags at most ``max_background_rate`` of the background calibration questions
    (ordinary traffic the rules let through)."""
    lang_masks = [np.array([x == lang for x in langs]) for lang in sorted(set(langs))]
    for t in THRESHOLDS:
        if len(calib_scores) and float(np.mean(calib_scores >= t)) > max_background_rate:
            continue
        flagged = scores >= t
        tp = int(np.sum(flagged & (y == 1)))
        fp = int(np.sum(flagged & (y == 0)))
        ok = (tp / (tp + fp) if tp + fp else 1.0) >= min_precision
        for in_lang in lang_masks:
            neg = (y == 0) & in_lang
            added_fp = int(np.sum(flagged & neg & ~rule_hits)) / max(int(np.sum(neg)), 1)
            ok = ok and added_fp <= max_added_fp
        if ok:
            return float(t)
    return float(THRESHOLDS[-1])


# --- evaluation ---------------------------------------------------------------------------------


def rates(pred: Mask, y: Array) -> dict[str, float | int]:
    pos, neg = y == 1, y == 0
    out: dict[str, float | int] = {"n_volatile": int(pos.sum()), "n_timeless": int(neg.sum())}
    out["recall"] = round(float(pred[pos].mean()), 4) if pos.any() else float("nan")
    out["false_bypass"] = round(float(pred[neg].mean()), 4) if neg.any() else float("nan")
    return out


def evaluate(
    rows: Sequence[Row], rule_pred: Mask, clf_pred: Mask, by_category: bool
) -> dict[str, object]:
    y = np.array([r.volatile for r in rows], dtype=np.float64)
    detectors = {
        "rules": rule_pred,
        "classifier": clf_pred,
        "rules_or_classifier": rule_pred | clf_pred,
    }
    report: dict[str, object] = {}
    for name, pred in detectors.items():
        entry: dict[str, object] = {"all": rates(pred, y)}
        for lang in ("en", "es"):
            mask = np.array([r.lang == lang for r in rows])
            if mask.any():
                entry[lang] = rates(pred[mask], y[mask])
        if by_category:
            cats: dict[str, object] = {}
            for cat in sorted({r.category for r in rows}):
                mask = np.array([r.category == cat for r in rows])
                cats[cat] = round(float((pred[mask] == (y[mask] == 1)).mean()), 4)
            entry["accuracy_by_category"] = cats
        report[name] = entry
    return report


def print_report(title: str, report: dict[str, object]) -> None:
    print(f"\n== {title}")
    for name, entry in report.items():
        assert isinstance(entry, dict)
        line = []
        for part in ("all", "en", "es"):
            if part in entry:
                r = entry[part]
                line.append(
                    f"{part}: recall {r['recall']:.3f} false-bypass {r['false_bypass']:.3f}"
                )
        print(f"  {name:20s} " + " | ".join(line))
        cats = entry.get("accuracy_by_category")
        if isinstance(cats, dict):
            weak = {c: a for c, a in cats.items() if a < 1.0}
            print(f"  {'':20s} categories below 1.0 accuracy: {weak or 'none'}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Fit and evaluate the volatile-question classifier (see module docstring).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="questions.jsonl")
    parser.add_argument("--dev", type=Path, default=DEFAULT_DEV, help="shared dev set")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="classifier.json to write")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help="model+vectors")
    parser.add_argument("--folds", type=int, default=5, help="cross-validation folds")
    parser.add_argument(
        "--floor-threshold",
        type=float,
        default=0.95,
        help="the threshold written is at least this: set for ordinary traffic (on the qqp_dev "
        "questions the classifier bypassed 6.2%% beyond the rules at 0.88, 2.0%% at 0.95)",
    )
    parser.add_argument("--seed", type=int, default=13, help="fold assignment seed")
    parser.add_argument(
        "--max-added-fp",
        type=float,
        default=0.02,
        help="threshold: most false bypasses (share of timeless train rows) the classifier may "
        "add on top of the rules, on out-of-fold scores",
    )
    parser.add_argument(
        "--min-precision", type=float, default=0.95, help="threshold: least out-of-fold precision"
    )
    parser.add_argument(
        "--background",
        type=Path,
        nargs="?",
        const=DEFAULT_BACKGROUND,
        help="opt-in: Quora pairs whose questions the rules let through serve as timeless "
        "background; some join training as label 0, others calibrate the threshold (off by "
        f"default; without a value: {DEFAULT_BACKGROUND})",
    )
    parser.add_argument("--background-n", type=int, default=1000, help="background to train on")
    parser.add_argument(
        "--background-weight", type=float, default=0.5, help="weight of a background row"
    )
    parser.add_argument(
        "--background-calib-n", type=int, default=2000, help="background to calibrate on"
    )
    parser.add_argument(
        "--max-background-rate",
        type=float,
        default=0.02,
        help="threshold: most of the calibration background the classifier may flag",
    )
    parser.add_argument(
        "--background-eval",
        type=Path,
        default=DEFAULT_BACKGROUND_EVAL,
        help="Quora pairs used only to report how much ordinary traffic each detector bypasses",
    )
    parser.add_argument("--no-write", action="store_true", help="evaluate only")
    parser.add_argument("--report", type=Path, help="also write the full metrics here (JSON)")
    args = parser.parse_args(argv)

    from deja.temporal.rules import TemporalDetector

    try:
        rows = load_questions(args.data)
        dev = load_dev(args.dev) if args.dev.exists() else []
    except DataError as exc:
        print(f"invalid data:\n{exc}", file=sys.stderr)
        return 2
    train = [r for r in rows if r.split == "train"]
    test = [r for r in rows if r.split == "test"]
    if not train or not test:
        print("invalid data: need both train and test rows", file=sys.stderr)
        return 2
    if not args.dev.exists():
        print(f"warning: dev set {args.dev} missing; skipped", file=sys.stderr)

    everything = [r.query for r in (*train, *test, *dev)]
    vectors, model_id = embed_all(everything, args.cache_dir)
    x_train = vectors[: len(train)]
    x_test = vectors[len(train) : len(train) + len(test)]
    x_dev = vectors[len(train) + len(test) :]
    y_train = np.array([r.volatile for r in train], dtype=np.float64)

    detector = TemporalDetector()

    def rule_hits(part: Sequence[Row]) -> Mask:
        return np.array([detector.check(r.query) is not None for r in part], dtype=bool)

    # timeless background: ordinary questions the rules let through (English only)
    background_train: list[str] = []
    background_calib: list[str] = []
    background_eval: list[str] = []
    if args.background is not None:
        if not args.background.exists():
            print(f"background file {args.background} missing", file=sys.stderr)
            return 2
        pool = [q for q in load_pair_questions(args.background) if detector.check(q) is None]
        np.random.default_rng(args.seed).shuffle(pool)
        background_train = pool[: args.background_n]
        background_calib = pool[args.background_n : args.background_n + args.background_calib_n]
    if args.background_eval.exists():
        pool = load_pair_questions(args.background_eval)
        np.random.default_rng(args.seed + 1).shuffle(pool)
        background_eval = pool[:2000]
    extra, _ = embed_all([*background_train, *background_calib, *background_eval], args.cache_dir)
    bg_train = extra[: len(background_train)]
    bg_calib = extra[len(background_train) : len(background_train) + len(background_calib)]
    bg_eval = extra[len(background_train) + len(background_calib) :]

    # regulariser by k-fold CV on train (strata: lang x category x label)
    folds = stratified_folds(
        [f"{r.lang}/{r.category}/{r.volatile}" for r in train], args.folds, args.seed
    )
    cv: dict[str, dict[str, float]] = {}
    for lam in LAMBDAS:
        oof = out_of_fold(x_train, y_train, folds, lam, bg_train, args.background_weight)
        cv[f"{lam:g}"] = {
            "log_loss": round(log_loss(oof, y_train), 4),
            "auc": round(auc(oof, y_train), 4),
        }
    best_lam = min(LAMBDAS, key=lambda lam: cv[f"{lam:g}"]["log_loss"])
    oof = out_of_fold(x_train, y_train, folds, best_lam, bg_train, args.background_weight)
    train_rules = rule_hits(train)
    # the calibration background is scored by the model fitted on all train (it never trains)
    xs, ys, ws = with_background(x_train, y_train, bg_train, args.background_weight)
    w, b = fit_logreg(xs, ys, best_lam, ws)
    # evaluate exactly what is written: 6 decimals
    w, b = np.round(w, 6), round(b, 6)
    calib_scores = sigmoid(bg_calib @ w + b) if len(bg_calib) else np.zeros(0)
    threshold = choose_threshold(
        oof,
        y_train,
        [r.lang for r in train],
        train_rules,
        args.max_added_fp,
        args.min_precision,
        calib_scores,
        args.max_background_rate,
    )
    threshold = max(threshold, args.floor_threshold)
    oof_pred = oof >= threshold
    print(f"embedder {model_id}; train {len(train)} test {len(test)} dev {len(dev)}")
    print("CV (log-loss, AUC) by lambda:", {k: (v["log_loss"], v["auc"]) for k, v in cv.items()})
    print(f"background: {len(bg_train)} train, {len(bg_calib)} calibration, {len(bg_eval)} eval")
    print(f"chosen lambda {best_lam:g}; threshold {threshold:.4f}")
    cv_report = evaluate(train, train_rules, oof_pred, by_category=False)
    print_report("train, out-of-fold classifier (rules were tuned on train)", cv_report)

    def clf_hits(x: Array) -> Mask:
        return np.asarray(sigmoid(x @ w + b) >= threshold, dtype=bool)

    test_report = evaluate(test, rule_hits(test), clf_hits(x_test), by_category=True)
    print_report("test split", test_report)
    dev_report: dict[str, object] = {}
    if dev:
        dev_report = evaluate(dev, rule_hits(dev), clf_hits(x_dev), by_category=False)
        print_report(f"dev set {args.dev.name}", dev_report)

    background_report: dict[str, object] = {}
    if len(bg_eval):
        eval_rules = np.array([detector.check(q) is not None for q in background_eval])
        eval_clf = np.asarray(sigmoid(bg_eval @ w + b) >= threshold, dtype=bool)
        background_report = {
            "file": args.background_eval.name,
            "questions": len(background_eval),
            "note": "unlabelled, nearly all timeless: the share each detector would bypass",
            "rules": round(float(eval_rules.mean()), 4),
            "classifier": round(float(eval_clf.mean()), 4),
            "rules_or_classifier": round(float((eval_rules | eval_clf).mean()), 4),
            "classifier_only": round(float((eval_clf & ~eval_rules).mean()), 4),
        }
        print(f"\n== ordinary traffic bypassed ({background_report['file']}, unlabelled):")
        print({k: v for k, v in background_report.items() if k not in ("file", "note")})
    if len(bg_calib):
        calib_rate = round(float(np.mean(calib_scores >= threshold)), 4)
        print(f"calibration background flagged by the classifier: {calib_rate}")

    test_scores = sigmoid(x_test @ w + b)
    wrong = []
    for row, rule, score in zip(test, rule_hits(test), test_scores, strict=True):
        decision = bool(rule) or bool(score >= threshold)
        if decision != row.volatile:
            wrong.append(
                {
                    "query": row.query,
                    "volatile": row.volatile,
                    "category": row.category,
                    "rules": bool(rule),
                    "score": round(float(score), 3),
                }
            )
    print(f"\n== test items still wrong (rules OR classifier): {len(wrong)}")
    for item in wrong:
        print(
            f"  [{'volatile' if item['volatile'] else 'timeless'}/{item['category']}] "
            f"{item['query']!r} rules={item['rules']} score={item['score']}"
        )

    metrics: dict[str, object] = {
        "cv": {
            "folds": args.folds,
            "seed": args.seed,
            "lambda_grid": cv,
            "lambda": best_lam,
            "threshold_rule": f"lowest t>=0.5 with out-of-fold precision>={args.min_precision} "
            f"and added false bypass<={args.max_added_fp} in each language"
            + (
                f", flagging at most {args.max_background_rate} of {len(bg_calib)} calibration "
                "background questions"
                if len(bg_calib)
                else ""
            ),
            "background": {
                "train": len(bg_train),
                "weight": args.background_weight if len(bg_train) else 0.0,
                "calibration": len(bg_calib),
                "source": args.background.name if args.background else None,
            },
            "out_of_fold": cv_report,
        },
        "test": test_report,
        "dev": dev_report,
        "ordinary_traffic": background_report,
        "test_wrong": wrong,
    }
    if args.report:
        args.report.write_text(json.dumps(metrics, indent=2, ensure_ascii=False) + "\n")
    if not args.no_write:
        try:
            data_name = str(args.data.resolve().relative_to(REPO))
        except ValueError:
            data_name = str(args.data)
        model = {
            "embedder_model_id": model_id,
            "dim": int(x_train.shape[1]),
            "weights": [float(v) for v in w],
            "bias": b,
            "threshold": threshold,
            "trained_on": f"{data_name}, {len(train)} train rows of {len(rows)}, "
            f"sha256 {file_sha256(args.data)}"
            + (
                f"; plus {len(bg_train)} + {len(bg_calib)} Quora questions "
                f"({args.background.name if args.background else ''}, rules-unflagged) as "
                "timeless background for training and threshold calibration "
                "(Quora released the pairs for non-commercial use)"
                if len(bg_train) or len(bg_calib)
                else ""
            ),
            "metrics": metrics,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(model, indent=1, ensure_ascii=False) + "\n")
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
