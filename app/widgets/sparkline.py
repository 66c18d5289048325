"""Unicode block sparklines for table cells (a DataTable cell cannot hold a widget).
Values are scaled to their own min..max; a flat series draws a flat line."""

from __future__ import annotations

from typing import Sequence

BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline_text(values: Sequence[float], width: int = 8) -> str:
    if not values:
        return " " * width
    if len(values) > width:
        # Average into `width` buckets so the newest trend stays visible.
        size = len(values) / width
        values = [sum(values[int(i * size):max(int((i + 1) * size), int(i * size) + 1)])
                  / max(1, len(values[int(i * size):max(int((i + 1) * size), int(i * size) + 1)])) for i in range(width)]
    lo, hi = min(values), max(values)
    span = hi - lo
    chars = [BLOCKS[3] if span == 0 else BLOCKS[min(7, int((v - lo) / span * 7.999))] for v in values]
    return "".join(chars).rjust(width)
