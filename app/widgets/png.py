"""Plots as PNG without an imaging library: each braille dot of a drawn plot becomes a square of pixels in its
curve's colour, axis lines become lines, and every other character (title, tick labels, axis label, legend) is drawn
with a 5 x 7 bitmap font (app/widgets/bitmap_font.py) in its cell; written with zlib and struct."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from rich.style import Style
from rich.text import Text

from app.widgets.bitmap_font import GLYPH_H, glyph_pixels

DOT_PX = 3  # pixels per braille dot side: a cell (2 x 4 dots) is 6 x 12 pixels
_BITS = ((0x01, 0, 0), (0x02, 0, 1), (0x04, 0, 2), (0x40, 0, 3), (0x08, 1, 0), (0x10, 1, 1), (0x20, 1, 2),
         (0x80, 1, 3))
_VERTICAL, _HORIZONTAL = set("│┤└"), set("─┬└")
RGB = tuple[int, int, int]


def _colour(style: Style, default: RGB) -> RGB:
    if style.color is None:
        return default
    triplet = style.color.get_truecolor()
    return (triplet.red, triplet.green, triplet.blue)


def _styles(line: Text) -> list[Style]:
    """The style of each character of one line."""
    styles = [line.style if isinstance(line.style, Style) else Style.parse(str(line.style or "none"))] * len(line)
    for span in line.spans:
        style = span.style if isinstance(span.style, Style) else Style.parse(str(span.style))
        for index in range(span.start, min(span.end, len(line))):
            styles[index] = styles[index] + style
    return styles


def _dimmed(colour: RGB, background: RGB) -> RGB:
    """A dim style's colour: halfway to the background, as a terminal shows it."""
    return tuple((c + b) // 2 for c, b in zip(colour, background))  # type: ignore[return-value]


def plot_pixels(figure: Text, background: RGB, foreground: RGB) -> tuple[int, int, list[bytearray]]:
    """(width, height, RGB rows) of a figure from render_plot."""
    lines = figure.split("\n")
    columns = max((len(line) for line in lines), default=1)
    cell_w, cell_h = 2 * DOT_PX, 4 * DOT_PX
    width, height = columns * cell_w, max(1, len(lines)) * cell_h
    rows = [bytearray(bytes(background) * width) for _ in range(height)]

    def fill(x0: int, y0: int, w: int, h: int, colour: RGB) -> None:
        for y in range(y0, min(height, y0 + h)):
            rows[y][3 * x0:3 * min(width, x0 + w)] = bytes(colour) * (min(width, x0 + w) - x0)

    for row, line in enumerate(lines):
        styles = _styles(line)
        for column, char in enumerate(line.plain):
            x, y = column * cell_w, row * cell_h
            colour = _colour(styles[column], foreground)
            code = ord(char) - 0x2800
            if char.isspace():
                continue
            if not (0 <= code < 256) and char not in _VERTICAL | _HORIZONTAL:  # text: title, ticks, labels
                if styles[column].dim:
                    colour = _dimmed(colour, background)
                top = y + (cell_h - GLYPH_H) // 2
                for dx, dy in glyph_pixels(char):
                    fill(x + dx, top + dy, 2 if styles[column].bold else 1, 1, colour)
                continue
            if 0 < code < 256:
                for bit, dx, dy in _BITS:
                    if code & bit:
                        fill(x + dx * DOT_PX, y + dy * DOT_PX, DOT_PX, DOT_PX, colour)
            if char in _VERTICAL:
                fill(x + cell_w // 2, y if char != "└" else y, 1, cell_h if char != "└" else cell_h // 2 + 1, colour)
            if char in _HORIZONTAL:
                fill(x if char == "─" else x + cell_w // 2, y + cell_h // 2, cell_w, 1, colour)
    return width, height, rows


def upscale(width: int, height: int, rows: list[bytearray], factor: int) -> tuple[int, int, list[bytearray]]:
    """Each pixel as a factor x factor square: a 5 x 7 font reads at a glance at 2."""
    if factor <= 1:
        return width, height, rows
    wide = [bytearray(b"".join(bytes(row[i:i + 3]) * factor for i in range(0, len(row), 3))) for row in rows]
    return width * factor, height * factor, [bytearray(row) for row in wide for _ in range(factor)]


def write_png(path: Path, width: int, height: int, rows: list[bytearray]) -> Path:
    """An 8-bit RGB PNG of the rows (filter type 0 on every row)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + bytes(row) for row in rows)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    Path(path).write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6))
                           + chunk(b"IEND", b""))
    return Path(path)
