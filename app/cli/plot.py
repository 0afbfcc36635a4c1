"""Pictures of the CLI's results, drawn with matplotlib (the ``deja[plot]`` extra), and the
self-contained HTML (inline SVG) they fall back to when matplotlib is not installed.

``deja calibrate --plot curve.png|curve.html`` draws precision against duplicate hit rate, one
line per decision score. A PNG needs matplotlib; without it the HTML is written next to the
asked path and the command says so (the default install stays small: matplotlib and its
dependencies are ~40 MB).
"""

from __future__ import annotations

import html
import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["Curves", "has_matplotlib", "new_figure", "save_png", "write_plot"]

Curves = Mapping[str, Sequence[tuple[float, float]]]
WIDTH, HEIGHT, MARGIN = 720, 440, 48
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")
#: Pixels per inch of the PNGs: 9 x 5.5 in -> 1350 x 825 px, readable on a laptop screen.
DPI = 150
INSTALL_HINT = "pip install 'deja[plot]'"


def has_matplotlib() -> bool:
    """Whether the optional plotting extra is installed (checked without importing it)."""
    return importlib.util.find_spec("matplotlib") is not None


def new_figure(width: float, height: float) -> Figure:
    """A figure on the Agg canvas: no pyplot, so no global figure state and no display."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def save_png(figure: Figure, path: Path) -> None:
    figure.savefig(path, format="png", dpi=DPI, facecolor="white")


def _xy(x: float, y: float) -> tuple[float, float]:
    return (
        MARGIN + x * (WIDTH - 2 * MARGIN),
        HEIGHT - MARGIN - y * (HEIGHT - 2 * MARGIN),
    )


def to_svg(curves: Curves, title: str) -> str:
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}">',
        f'<text x="{MARGIN}" y="24" font-family="sans-serif" font-size="14">'
        f"{html.escape(title)}</text>",
    ]
    for v in (0.0, 0.25, 0.5, 0.75, 1.0):
        x0, y0 = _xy(0, v)
        x1, _ = _xy(1, v)
        parts.append(f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="#ddd"/>')
        parts.append(f'<text x="8" y="{y0 + 4}" font-size="11">{v:.2f}</text>')
        gx, gy = _xy(v, 0)
        parts.append(f'<text x="{gx - 10}" y="{gy + 16}" font-size="11">{v:.2f}</text>')
    parts.append(
        f'<text x="{WIDTH / 2 - 60}" y="{HEIGHT - 6}" font-size="12">duplicate hit rate</text>'
    )
    for i, (name, points) in enumerate(curves.items()):
        colour = COLOURS[i % len(COLOURS)]
        path = " ".join(f"{px:.1f},{py:.1f}" for px, py in (_xy(x, y) for x, y in points))
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
        parts.append(
            f'<text x="{WIDTH - 220}" y="{MARGIN + 16 * i}" font-size="12" '
            f'fill="{colour}">{html.escape(name)}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


def write_html(curves: Curves, title: str, path: Path) -> None:
    body = to_svg(curves, title)
    path.write_text(
        f"<!doctype html><meta charset=utf-8><title>{html.escape(title)}</title>"
        f"<body>{body}<p>y: labelled precision, x: duplicate hit rate</p></body>\n"
    )


def curves_png(curves: Curves, title: str, path: Path) -> None:
    """Labelled precision against the duplicate hit rate, one line per decision score, both
    axes in percent, with the 0.90 and 0.95 precision targets drawn for reference."""
    from matplotlib.ticker import PercentFormatter

    figure = new_figure(9, 5.5)
    ax = figure.add_subplot()
    for i, (name, points) in enumerate(curves.items()):
        if not points:
            continue
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, color=COLOURS[i % len(COLOURS)], linewidth=2, marker=".", label=name)
    for target in (0.90, 0.95):
        ax.axhline(target, color="#888", linewidth=0.8, linestyle="--")
        ax.annotate(
            f"precision target {target:.2f}",
            (0.99, target),
            xycoords=("axes fraction", "data"),
            textcoords="offset points",
            xytext=(0, 3),
            ha="right",
            fontsize=8,
            color="#555",
        )
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("duplicate hit rate (% of duplicate questions served from cache)")
    ax.set_ylabel("labelled precision (% of hits that are true duplicates)")
    ax.set_title(title)
    ax.grid(True, color="#e5e5e5")
    ax.legend(title="decision score", loc="lower left")
    save_png(figure, path)


def write_plot(curves: Curves, title: str, path: Path) -> Path:
    """PNG (matplotlib) for ``.png``, HTML (inline SVG, with the legend) otherwise; a PNG
    without matplotlib becomes the HTML beside it, said on stderr. Returns the path written."""
    if path.suffix.lower() != ".png":
        write_html(curves, title, path)
        return path
    if has_matplotlib():
        curves_png(curves, title, path)
        return path
    fallback = path.with_suffix(".html")
    click.echo(
        f"matplotlib is not installed ({INSTALL_HINT}): wrote {fallback} instead of {path}",
        err=True,
    )
    write_html(curves, title, fallback)
    return fallback
