"""A log viewer with a search filter: the run detail screen feeds it new lines as a worker tails the file.
Keeps at most MAX_LINES in memory (older lines drop off) so a chatty run cannot grow the UI without bound."""

from __future__ import annotations

from collections import deque
from typing import Iterable

from textual.widgets import Log

MAX_LINES = 5000


class LogTail(Log):
    """Shows the tail of a log; `search` keeps only lines containing the text (case-insensitive)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(max_lines=MAX_LINES, auto_scroll=True, **kwargs)
        self._all: deque[str] = deque(maxlen=MAX_LINES)
        self._needle = ""

    @property
    def search(self) -> str:
        return self._needle

    def append_lines(self, lines: Iterable[str]) -> None:
        lines = list(lines)
        self._all.extend(lines)
        matching = [line for line in lines if self._matches(line)]
        if matching:
            self.write_lines(matching)

    def set_search(self, needle: str) -> None:
        self._needle = needle.lower()
        self.clear()
        self.write_lines([line for line in self._all if self._matches(line)])

    def _matches(self, line: str) -> bool:
        return not self._needle or self._needle in line.lower()
