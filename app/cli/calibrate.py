"""``deja calibrate --pairs FILE.jsonl``: rebuild the precision-target → cut-off table on a
team's own labelled pairs, in cache mode (every distinct ``a`` cached, every ``b`` asked) and
pairwise, print the curves, write the table the gateway loads
(``DEJA_SEMANTIC_CALIBRATION_FILE``), and optionally draw them (``--plot curve.png|.html``).

Runs locally with the shipped embedder and verifier; it never talks to a gateway.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click
import numpy as np
import orjson

from app.cli.plot import write_plot
from app.cli.support import CONTEXT, BadSettings, output_option, table
from config.settings import ConfigError, load_settings
from deja.embedding.onnx.embedder import load_onnx_embedder
from deja.errors import DejaError
from deja.semantic.auc import auc
from deja.semantic.calibration import (
    CacheRun,
    Decision,
    cache_run,
    fit_combined,
    metrics_at,
    serve,
    serve_cosine,
)
from deja.semantic.crossencoder import MODEL_FILE, SHIPPED_DIR, CrossEncoder, check_sums
from deja.semantic.curves import TARGETS, build_table, curve_area, write_calibration
from deja.semantic.cutoffs import CALIBRATION_FILE, load_table
from deja.semantic.pairs import Pair, read_pairs

#: τ keeps a one-sided 95% Wilson lower bound of the measured precision at the target.
Z_ONE_SIDED = 1.645
#: Targets on which the two decision scores are compared (sum of hit rates).
COMPARE = (0.85, 0.88, 0.90, 0.92, 0.94, 0.95)
COSINES = (0.80, 0.85, 0.90, 0.92, 0.95, 0.97, 0.98, 0.99)


def _shipped_vetoes(verifier_dir: Path) -> tuple[str, ...]:
    path = verifier_dir / CALIBRATION_FILE
    return load_table(path).vetoes if path.is_file() else ()


def _progress(label: str) -> Any:
    started = time.monotonic()
    last = [0.0]

    def update(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 5.0 or done == total:
            last[0] = now
            rate = done / max(now - started, 1e-9)
            eta = (total - done) / rate if rate else 0.0
            click.echo(f"{label}: {done}/{total} ({rate:.0f}/s, ETA {eta:.0f}s)", err=True)

    return update


def _pairwise(rows: list[Pair], vectors: dict[str, Any], encoder: CrossEncoder) -> dict[str, Any]:
    labels = np.array([r.duplicate for r in rows])
    cos = np.array([float(np.dot(vectors[r.a], vectors[r.b])) for r in rows])
    logits = np.concatenate([encoder.logits(r.b, [r.a]) for r in rows])
    return {
        "pairs": len(rows),
        "auc_cosine": round(auc(cos, labels), 4),
        "auc_verifier": round(auc(logits, labels), 4),
    }


def _choose(
    run: CacheRun, decision: str, floor: float, min_labelled: int, vetoes: tuple[str, ...]
) -> Decision:
    """The decision score; the mismatch vetoes are the shipped table's (measured there)."""
    if decision == "verifier":
        return Decision("verifier", vetoes=vetoes)
    try:
        combined = fit_combined(run, floor, vetoes)
    except np.linalg.LinAlgError:
        # Too few or too uniform pairs to fit [logit, cosine]: the plain verifier score.
        if decision == "combined":
            raise click.ClickException(
                "cannot fit the combined score on these pairs (too few, or all one label): "
                "label more pairs, or --decision verifier"
            ) from None
        return Decision("verifier", vetoes=vetoes)
    if decision == "combined":
        return combined
    plain = Decision("verifier", vetoes=vetoes)
    areas = {
        d: curve_area(
            build_table(run, serve(run, d, floor), TARGETS, min_labelled, z=Z_ONE_SIDED), COMPARE
        )
        for d in (plain, combined)
    }
    return max(areas, key=lambda d: areas[d])


@click.command("calibrate", context_settings=CONTEXT)
@click.option(
    "--pairs",
    "pairs_file",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help='Labelled pairs, JSONL: {"a": cached, "b": asked, "duplicate": true|false}.',
)
@output_option(
    "calibration.json", "Where the table goes (then set DEJA_SEMANTIC_CALIBRATION_FILE to it)."
)
@click.option(
    "--k",
    type=click.IntRange(1, 32),
    default=None,
    help="Candidates verified per lookup (default: the gateway's, DEJA_SEMANTIC_TOP_K or the "
    "shipped table's k).",
)
@click.option(
    "--floor",
    type=click.FloatRange(0, 1),
    default=None,
    help="Cosine floor of the candidates (default: the shipped table's, as the gateway uses).",
)
@click.option(
    "--decision",
    type=click.Choice(["auto", "verifier", "combined"]),
    default="auto",
    show_default=True,
    help="Decision score: the verifier's probability, a fit of [logit, cosine], or the better.",
)
@click.option(
    "--min-labelled",
    type=click.IntRange(1),
    default=30,
    show_default=True,
    help="Least labelled hits a precision estimate must rest on.",
)
@click.option(
    "--verifier-dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=SHIPPED_DIR,
    help="The verifier to calibrate (default: the shipped one).",
)
@click.option(
    "--allow-partial",
    is_flag=True,
    help="Write the table even when some targets cannot be fitted (the gateway then refuses "
    "those targets); without it such a run writes nothing and exits 1.",
)
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), help="PNG or HTML.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def calibrate_command(
    pairs_file: Path,
    output: Path,
    k: int | None,
    floor: float | None,
    decision: str,
    min_labelled: int,
    verifier_dir: Path,
    allow_partial: bool,
    plot: Path | None,
    as_json: bool,
) -> None:
    """Measure precision and hit rate on your own labelled pairs and write the table that
    turns a precision target (DEJA_SEMANTIC_PRECISION) into the verifier's cut-off."""
    try:
        rows = read_pairs(pairs_file)
        settings = load_settings(None)
        shipped = load_table(SHIPPED_DIR / CALIBRATION_FILE)
        k = k or settings.semantic_top_k or shipped.k
        floor = shipped.cosine_floor if floor is None else floor
        check_sums(verifier_dir)
        encoder = CrossEncoder.load(verifier_dir, max_tokens=64)
        embedder = load_onnx_embedder(settings.model_dir or settings.data_dir / "models")
    except ConfigError as exc:
        raise BadSettings(str(exc)) from None
    except (ValueError, DejaError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    texts = list(dict.fromkeys([r.a for r in rows] + [r.b for r in rows]))
    click.echo(f"embedding {len(texts)} questions…", err=True)
    vectors = dict(zip(texts, np.asarray(embedder.embed_batch(texts)), strict=True))

    def embed(batch: list[str]) -> Any:
        return np.stack([vectors[t] for t in batch])

    run = cache_run(rows, embed, encoder.logits, k=k, floor=floor, progress=_progress("verify"))
    vetoes = _shipped_vetoes(verifier_dir)
    chosen = _choose(run, decision, floor, min_labelled, vetoes)
    served = serve(run, chosen, floor)
    rows_table = build_table(run, served, TARGETS, min_labelled, z=Z_ONE_SIDED)
    fitted = (
        f"{pairs_file.name}: {len(rows)} pairs ({int(run.duplicate.sum())} duplicates), cache "
        f"mode, top-{k} by cosine >= {floor}; deja calibrate"
    )
    result = _report(run, served, chosen, rows_table, _pairwise(rows, vectors, encoder))
    unfitted = [r["precision"] for r in rows_table if r["tau"] is None]
    written = not unfitted or (allow_partial and len(unfitted) < len(rows_table))
    if written:
        write_calibration(
            output, verifier_dir / MODEL_FILE, chosen, floor, k, None, fitted, rows_table
        )
    if plot is not None:
        title = f"deja calibrate: {pairs_file.name}, {len(rows)} pairs, top-{k} cache mode"
        plot = write_plot(_curves(run, served, chosen.kind), title, plot)
    if as_json:
        payload = {**result, "table": rows_table, "unfitted": unfitted, "written": written}
        click.echo(orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY, default=float).decode())
    else:
        _print(result, rows_table, output if written else None, plot)
    if unfitted:
        _refuse_unfitted(unfitted, len(rows_table), min_labelled, written)


def _refuse_unfitted(unfitted: list[float], total: int, min_labelled: int, written: bool) -> None:
    """Say which targets got no cut-off (a table serving them would never hit) and exit 1
    unless the table was written on purpose with --allow-partial."""
    targets = (
        f"{unfitted[0]:.2f}" if len(unfitted) == 1 else f"{unfitted[0]:.2f}..{unfitted[-1]:.2f}"
    )
    why = (
        f"no cut-off for {len(unfitted)} of {total} precision targets ({targets}): fewer than "
        f"--min-labelled {min_labelled} labelled hits reached that precision"
    )
    if written:
        click.echo(f"warning: {why}; the gateway refuses those targets", err=True)
        return
    hint = "label more pairs" if len(unfitted) == total else "label more pairs, or --allow-partial"
    raise click.ClickException(f"{why}; nothing written ({hint})")


def _report(
    run: CacheRun, served: Any, chosen: Decision, rows_table: list[dict[str, Any]], pw: Any
) -> dict[str, Any]:
    cosine = serve_cosine(run)
    return {
        "decision": chosen.kind,
        "pairwise": pw,
        "cosine": [{"theta": t, **_rounded(metrics_at(run, cosine, t))} for t in COSINES],
        "targets": rows_table,
        "scored_pairs": run.scored_pairs,
    }


def _rounded(m: dict[str, float]) -> dict[str, Any]:
    return {k: round(float(v), 4) for k, v in m.items() if k != "tau"}


def _curves(run: CacheRun, served: Any, kind: str) -> dict[str, list[tuple[float, float]]]:
    cosine = serve_cosine(run)
    verified = []
    for tau in np.linspace(0.05, 0.995, 60):
        m = metrics_at(run, served, float(tau))
        if m["labelled"]:
            verified.append((m["hit_rate"], m["precision"]))
    plain = []
    for theta in np.linspace(0.70, 0.995, 60):
        m = metrics_at(run, cosine, float(theta))
        if m["labelled"]:
            plain.append((m["hit_rate"], m["precision"]))
    return {
        f"verified: {kind} score, cut-off τ": sorted(verified),
        "cosine alone (θ)": sorted(plain),
    }


def _print(
    result: dict[str, Any], rows_table: list[dict[str, Any]], out: Path | None, plot: Path | None
) -> None:
    pw = result["pairwise"]
    click.echo(
        f"pairwise AUC: verifier {pw['auc_verifier']}, cosine {pw['auc_cosine']} "
        f"({pw['pairs']} pairs); decision score: {result['decision']}"
    )
    click.echo("\ncache mode, cosine alone:")
    click.echo(
        table(
            ["THETA", "PRECISION", "HIT RATE", "HITS", "UNJUDGED"],
            [
                [c["theta"], c["precision"], c["hit_rate"], c["hits"], c["unjudged"]]
                for c in result["cosine"]
            ],
            right="01234",
        )
    )
    click.echo("\ncache mode, verified (the table the gateway loads):")
    click.echo(
        table(
            ["TARGET", "TAU", "MEASURED", "HIT RATE"],
            [
                [r["precision"], r["tau"], r.get("measured_precision"), r["hit_rate"]]
                for r in rows_table
            ],
            right="0123",
        )
    )
    wrote = [str(p) for p in (out, plot) if p is not None]
    if wrote:
        click.echo(f"\nwrote {' and '.join(wrote)}", err=True)
    sys.stdout.flush()
