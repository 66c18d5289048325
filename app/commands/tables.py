"""Tables for the CLI that keep identifiers whole at any terminal width: a name column never shrinks below its
longest value; columns that matter less are dropped, least useful first, until the table fits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from rich.table import Table
from rich.text import Text


@dataclass(frozen=True)
class Column:
    """header; whole: never cut (names, ids); drop: order in which it goes when short of room (higher goes first,
    None never goes); justify: rich's."""

    header: str
    whole: bool = False
    drop: Optional[int] = None
    justify: str = "left"


def _cell_width(cell: object) -> int:
    text = cell if isinstance(cell, Text) else Text.from_markup(str(cell))
    return max((Text(line).cell_len for line in text.plain.splitlines()), default=0)


def fitted_table(columns: Sequence[Column], rows: Sequence[Sequence[object]], width: int,
                 **table_options) -> Table:
    """A rich Table of `rows` that fits `width` cells: drops columns by their `drop` order first; whole columns keep
    their full width (and are never wrapped), whatever is left shrinks."""
    natural = [max([len(c.header)] + [_cell_width(row[i]) for row in rows]) for i, c in enumerate(columns)]
    shown = list(range(len(columns)))

    edges = 0 if table_options.get("box", None) is None else 1  # a boxed table draws a rule between columns

    def total() -> int:
        return sum(natural[i] for i in shown) + (2 + edges) * len(shown) + edges  # one cell of padding each side

    droppable = sorted((i for i, c in enumerate(columns) if c.drop is not None), key=lambda i: -columns[i].drop)
    for index in droppable:
        if total() <= width:
            break
        shown.remove(index)
    table_options.setdefault("box", None)
    table = Table(header_style="bold", **table_options)
    for i in shown:
        column = columns[i]
        if column.whole:
            table.add_column(column.header, justify=column.justify, no_wrap=True, min_width=natural[i])
        else:
            table.add_column(column.header, justify=column.justify)
    for row in rows:
        table.add_row(*(row[i] for i in shown))
    return table
