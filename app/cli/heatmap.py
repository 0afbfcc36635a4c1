"""The ``deja tune`` throughput surface as a heat map: a PNG (no plotting library: pixels and a
3x5 digit font, encoded by :func:`app.cli.plot.encode_png`) and a self-contained HTML table.

Columns are max-num-seqs, rows max-num-batched-tokens, each cell its output tokens/s: darker is
faster (from the slowest to the fastest cell); grey cells failed or timed out; a red frame
marks a cell over the TTFT SLO, a black one the recommendation.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from app.cli.plot import encode_png
from tuning.grid import CellResult

__all__ = ["write_heatmap_html", "write_heatmap_png"]

_GLYPHS = {
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111",
    "3": "111001111001111", "4": "101101111001001", "5": "111100111001111",
    "6": "111100111101111", "7": "111001010010010", "8": "111101111101111",
    "9": "111101111001111", ".": "000000000000010", "-": "000000111000000",
    "x": "000101010101000", "/": "001001010100100", " ": "000000000000000",
}  # fmt: skip
_SCALE = 2
_CELL_W, _CELL_H, _LEFT, _TOP = 96, 44, 80, 36
_GREY = (200, 200, 200)
_RED = (214, 39, 40)
_BLACK = (0, 0, 0)


def _text(img: npt.NDArray[np.uint8], x: int, y: int, text: str, rgb: tuple[int, ...]) -> None:
    for ch in text:
        glyph = _GLYPHS.get(ch, _GLYPHS[" "])
        for i, bit in enumerate(glyph):
            if bit == "1":
                gy, gx = y + (i // 3) * _SCALE, x + (i % 3) * _SCALE
                img[gy : gy + _SCALE, gx : gx + _SCALE] = rgb
        x += 4 * _SCALE


def _frame(img: npt.NDArray[np.uint8], x: int, y: int, rgb: tuple[int, ...], width: int) -> None:
    img[y : y + width, x : x + _CELL_W] = rgb
    img[y + _CELL_H - width : y + _CELL_H, x : x + _CELL_W] = rgb
    img[y : y + _CELL_H, x : x + width] = rgb
    img[y : y + _CELL_H, x + _CELL_W - width : x + _CELL_W] = rgb


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


def write_heatmap_png(
    results: Sequence[CellResult],
    seqs: Sequence[int],
    tokens: Sequence[int],
    path: Path,
    *,
    best: CellResult | None,
    slo_ms: float | None,
) -> None:
    """Throughput per cell (tok/s, the number in the cell), axes labelled with their values."""
    cells = _by_cell(results)
    span = _span(results)
    img = np.full((_TOP + _CELL_H * len(tokens) + 8, _LEFT + _CELL_W * len(seqs) + 8, 3), 255,
                  dtype=np.uint8)  # fmt: skip
    for col, s in enumerate(seqs):
        _text(img, _LEFT + col * _CELL_W + 8, 12, str(s), _BLACK)
    for row, t in enumerate(tokens):
        y = _TOP + row * _CELL_H
        _text(img, 6, y + _CELL_H // 2 - 5, str(t), _BLACK)
        for col, s in enumerate(seqs):
            x = _LEFT + col * _CELL_W
            r = cells.get((s, t))
            colour = _shade(r.throughput, span) if r is not None and r.ok else _GREY
            img[y + 1 : y + _CELL_H - 1, x + 1 : x + _CELL_W - 1] = colour
            if r is None:
                continue
            ink = (255, 255, 255) if r.ok and _dark(r.throughput, span) else _BLACK
            _text(img, x + 8, y + _CELL_H // 2 - 5, f"{r.throughput:.0f}" if r.ok else "-", ink)
            if r.ok and _over_slo(r, slo_ms):
                _frame(img, x, y, _RED, 3)
            if best is not None and (s, t) == (best.seqs, best.tokens):
                _frame(img, x, y, _BLACK, 4)
    path.write_bytes(encode_png(img))


def write_heatmap_html(
    results: Sequence[CellResult],
    seqs: Sequence[int],
    tokens: Sequence[int],
    path: Path,
    *,
    best: CellResult | None,
    slo_ms: float | None,
    title: str,
) -> None:
    """A table: throughput, TTFT p99, ITL p99 and preemptions/min per cell."""
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
