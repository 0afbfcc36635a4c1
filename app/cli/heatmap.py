"""The ``deja tune`` throughput surface as a heat map: a PNG (matplotlib, the ``deja[plot]``
extra) and a self-contained HTML table (no dependency; the PNG's fallback).

Columns are max-num-seqs, rows max-num-batched-tokens, each cell its output tokens/s and TTFT
p99: darker is faster (from the slowest to the fastest cell); grey cells failed or timed out; a
red frame marks a cell over the TTFT SLO, a black one the recommendation.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.cli.plot import new_figure, save_png
from tuning.grid import CellResult

__all__ = ["Heatmap", "write_heatmap_html", "write_heatmap_png"]


def _shade(value: float, span: tuple[float, float]) -> tuple[int, int, int]:
    """Light (the slowest cell) to dark blue (the fastest)."""
    low, high = span
    f = (value - low) / (high - low) if high > low else 1.0
    return (int(235 - 204 * f), int(243 - 124 * f), int(250 - 70 * f))


def _span(results: Sequence[CellResult]) -> tuple[float, float]:
    values = [r.throughput for r in results if r.ok]
    return (min(values), max(values)) if values else (0.0, 0.0)


def _dark(value: float, span: tuple[float, float]) -> bool:
    low, high = span
    return high <= low or (value - low) / (high - low) > 0.6


def _by_cell(results: Sequence[CellResult]) -> dict[tuple[int, int], CellResult]:
    return {(r.seqs, r.tokens): r for r in results}


def _over_slo(r: CellResult, slo_ms: float | None) -> bool:
    return slo_ms is not None and (r.ttft_p99_ms is None or r.ttft_p99_ms > slo_ms)


def _frame(ax: Any, col: int, row: int, colour: str, width: float, label: str) -> None:
    from matplotlib.patches import Rectangle

    ax.add_patch(
        Rectangle((col - 0.46, row - 0.46), 0.92, 0.92, fill=False, edgecolor=colour,
                  linewidth=width, label=label)
    )  # fmt: skip


def _cell_text(r: CellResult) -> str:
    if not r.ok:
        return r.status
    return f"{r.throughput:,.0f}\nTTFT p99\n{_seconds(r.ttft_p99_ms)}"


def _seconds(ms: float | None) -> str:
    return "-" if ms is None else (f"{ms / 1000:.1f} s" if ms >= 1000 else f"{ms:.0f} ms")


@dataclass(frozen=True, slots=True)
class Heatmap:
    """What both pictures of one ``deja tune`` run show: the cells measured, the two axes'
    values (in the order of the flags), the recommended cell and the TTFT SLO that framed it."""

    results: Sequence[CellResult]
    seqs: Sequence[int]
    tokens: Sequence[int]
    best: CellResult | None
    slo_ms: float | None
    title: str = "deja tune: output tokens/s per cell"


def write_heatmap_png(heatmap: Heatmap, path: Path) -> None:
    """Throughput per cell on a colour scale with its bar (tok/s), TTFT p99 in each cell, both
    axes named with their flag, the SLO and the recommendation framed and in the legend."""
    results, seqs, tokens = heatmap.results, heatmap.seqs, heatmap.tokens
    best, slo_ms, title = heatmap.best, heatmap.slo_ms, heatmap.title
    cells = _by_cell(results)
    grid = np.full((len(tokens), len(seqs)), np.nan)
    for (s, t), cell in cells.items():
        if cell.ok and s in seqs and t in tokens:
            grid[list(tokens).index(t), list(seqs).index(s)] = cell.throughput
    figure = new_figure(max(8.0, 2.2 + 1.4 * len(seqs)), max(4.5, 2.0 + 0.9 * len(tokens)))
    ax = figure.add_subplot()
    ax.set_facecolor("#cccccc")  # failed / timed-out cells show the background
    image = ax.imshow(grid, cmap="Blues", aspect="auto", origin="lower")
    figure.colorbar(image, ax=ax, label="output tokens/s (higher is better)")
    span = _span(results)
    for row, t in enumerate(tokens):
        for col, s in enumerate(seqs):
            r = cells.get((s, t))
            if r is None:
                continue
            ink = "white" if r.ok and _dark(r.throughput, span) else "black"
            ax.text(col, row, _cell_text(r), ha="center", va="center", fontsize=8, color=ink)
            if r.ok and _over_slo(r, slo_ms):
                _frame(ax, col, row, "#d62728", 2.5, f"TTFT p99 over {slo_ms:g} ms")
            if best is not None and (s, t) == (best.seqs, best.tokens):
                _frame(ax, col, row, "black", 4, "recommended")
    ax.set_xticks(range(len(seqs)), [str(s) for s in seqs])
    ax.set_yticks(range(len(tokens)), [f"{t:,}" for t in tokens])
    ax.set_xlabel("--max-num-seqs (sequences in a batch)")
    ax.set_ylabel("--max-num-batched-tokens\n(tokens per scheduler step)")
    ax.set_title(title.replace(" (", "\n("), fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    if unique:
        figure.legend(unique.values(), unique.keys(), loc="outside lower center", ncol=2,
                      fontsize=8, frameon=False)  # fmt: skip
    save_png(figure, path)


def write_heatmap_html(heatmap: Heatmap, path: Path) -> None:
    """A table: throughput, TTFT p99, ITL p99 and preemptions/min per cell."""
    results, seqs, tokens = heatmap.results, heatmap.seqs, heatmap.tokens
    best, slo_ms, title = heatmap.best, heatmap.slo_ms, heatmap.title
    cells = _by_cell(results)
    span = _span(results)
    rows = ["<tr><th>tokens \\ seqs</th>" + "".join(f"<th>{s}</th>" for s in seqs) + "</tr>"]
    for t in tokens:
        tds = [f"<th>{t}</th>"]
        for s in seqs:
            r = cells.get((s, t))
            if r is None:
                tds.append("<td></td>")
                continue
            if not r.ok:
                tds.append(f'<td style="background:#ccc" title="{html.escape(r.error or "")}">'
                           f"{html.escape(r.status)}</td>")  # fmt: skip
                continue
            bg = "rgb({},{},{})".format(*_shade(r.throughput, span))
            ink = "#fff" if _dark(r.throughput, span) else "#000"
            border = "4px solid #000" if best is not None and r.cell == best.cell else (
                "3px solid #d62728" if _over_slo(r, slo_ms) else "1px solid #fff")  # fmt: skip
            tds.append(
                f'<td style="background:{bg};color:{ink};border:{border}">'
                f"<b>{r.throughput:,.0f}</b> tok/s<br>TTFT p99 {_ms(r.ttft_p99_ms)}<br>"
                f"ITL p99 {_ms(r.itl_p99_ms)}<br>{r.preemptions_per_min:g} preempt/min</td>"
            )
        rows.append("<tr>" + "".join(tds) + "</tr>")
    slo = f"TTFT p99 SLO {slo_ms:g} ms (red frame: over it); " if slo_ms is not None else ""
    path.write_text(
        f"<!doctype html><meta charset=utf-8><title>{html.escape(title)}</title>"
        "<style>td,th{padding:6px 10px;font:13px sans-serif;text-align:right}</style>"
        f"<h3>{html.escape(title)}</h3><table>{''.join(rows)}</table>"
        f"<p>{slo}black frame: recommended; grey: failed or timed out.</p>\n"
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} ms"
