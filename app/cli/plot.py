"""Precision / hit-rate curves as a self-contained HTML page (inline SVG) or a PNG, with no
plotting library: ``deja calibrate --plot curve.png|curve.html``.

Each curve is a list of (hit rate, precision) points; the x axis is the duplicate hit rate, the
y axis labelled precision, both 0..1."""

from __future__ import annotations

import html
import itertools
import struct
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

Curves = Mapping[str, Sequence[tuple[float, float]]]
WIDTH, HEIGHT, MARGIN = 720, 440, 48
COLOURS = ((31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189), (255, 127, 14))


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
        r, g, b = COLOURS[i % len(COLOURS)]
        path = " ".join(f"{px:.1f},{py:.1f}" for px, py in (_xy(x, y) for x, y in points))
        parts.append(
            f'<polyline fill="none" stroke="rgb({r},{g},{b})" stroke-width="2" points="{path}"/>'
        )
        parts.append(
            f'<text x="{WIDTH - 220}" y="{MARGIN + 16 * i}" font-size="12" '
            f'fill="rgb({r},{g},{b})">{html.escape(name)}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


def write_html(curves: Curves, title: str, path: Path) -> None:
    body = to_svg(curves, title)
    path.write_text(
        f"<!doctype html><meta charset=utf-8><title>{html.escape(title)}</title>"
        f"<body>{body}<p>y: labelled precision, x: duplicate hit rate</p></body>\n"
    )


def _line(
    img: npt.NDArray[np.uint8],
    a: tuple[float, float],
    b: tuple[float, float],
    rgb: tuple[int, int, int],
) -> None:
    steps = int(max(abs(b[0] - a[0]), abs(b[1] - a[1]))) + 1
    xs = np.linspace(a[0], b[0], steps).round().astype(int)
    ys = np.linspace(a[1], b[1], steps).round().astype(int)
    for dx in (0, 1):
        ok = (xs + dx >= 0) & (xs + dx < WIDTH) & (ys >= 0) & (ys < HEIGHT)
        img[ys[ok], xs[ok] + dx] = rgb


def to_png(curves: Curves) -> bytes:
    """The curves on a white canvas with a grid every 0.25 (legend colours as in the HTML)."""
    img = np.full((HEIGHT, WIDTH, 3), 255, dtype=np.uint8)
    for v in (0.0, 0.25, 0.5, 0.75, 1.0):
        _line(img, _xy(0, v), _xy(1, v), (220, 220, 220))
        _line(img, _xy(v, 0), _xy(v, 1), (220, 220, 220))
    for i, points in enumerate(curves.values()):
        rgb = COLOURS[i % len(COLOURS)]
        for p, q in itertools.pairwise(points):
            _line(img, _xy(*p), _xy(*q), rgb)
    return encode_png(img)


def encode_png(img: npt.NDArray[np.uint8]) -> bytes:
    """An RGB image (height x width x 3, uint8) as PNG bytes (no imaging library)."""
    height, width, _ = img.shape
    raw = b"".join(b"\x00" + img[row].tobytes() for row in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def write_plot(curves: Curves, title: str, path: Path) -> None:
    """PNG for ``.png``, HTML (inline SVG, with the legend) otherwise."""
    if path.suffix.lower() == ".png":
        path.write_bytes(to_png(curves))
    else:
        write_html(curves, title, path)
