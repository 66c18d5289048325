"""The kernel pane of the trajectory inspector: highlighted source, or its diff against the previous turn,
unified or side by side. Pure rendering of two strings; the inspector decides which turns to compare."""

from __future__ import annotations

import difflib
import threading
from typing import Optional

from rich.syntax import Syntax
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Static

from app.widgets.format import theme_colour

MODES = ("code", "unified", "split")
_LEXERS: dict = {}
# Pygments builds a lexer class's token tables on first instantiation, non-atomically: the warm-up thread and the UI
# thread creating the same lexer at once gave differently highlighted code (seen as a flaky snapshot).
_LEXERS_LOCK = threading.Lock()


def lexer_for(language: str):
    """A cached pygments lexer: looking one up by name scans plugins (~100 ms the first time), so it is done
    once, ideally early in a background thread (see warm_lexers)."""
    with _LEXERS_LOCK:
        lexer = _LEXERS.get(language)
        if lexer is None:
            from pygments.lexers import get_lexer_by_name

            lexer = _LEXERS[language] = get_lexer_by_name(language)
        return lexer


def warm_lexers() -> None:
    for language in ("python", "cuda"):
        lexer_for(language)


def kernel_language(source: str, run_backend: str = "") -> str:
    """'cuda' for bare CUDA C++ sources, else 'python' (Triton and load_inline modules are Python files)."""
    head = source.lstrip()[:2000]
    python_markers = ("import ", "from ", "class ModelNew", "def ")
    if "__global__" in head and not any(marker in head for marker in python_markers):
        return "cuda"
    if head.startswith("#include"):
        return "cuda"
    return "python"


def unified_diff_text(old: str, new: str, app) -> Text:
    added, removed, hunk = (theme_colour(app, "success"), theme_colour(app, "error"), theme_colour(app, "secondary"))
    text = Text(no_wrap=True, overflow="ellipsis")
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), "previous turn", "this turn", lineterm="", n=3))
    if not lines:
        return Text("(no change from the previous turn)", style="italic")
    for line in lines:
        style = ""
        if line.startswith("+++") or line.startswith("---"):
            style = "bold"
        elif line.startswith("@@"):
            style = hunk
        elif line.startswith("+"):
            style = added
        elif line.startswith("-"):
            style = removed
        text.append(line + "\n", style=style)
    return text


def _wrap(line: str, width: int) -> list[str]:
    """A line cut into pieces of at most `width` characters (at least one piece)."""
    return [line[i:i + width] for i in range(0, len(line), width)] or [""]


def _changed_spans(old: str, new: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Character ranges that differ between a removed line and the line replacing it."""
    old_spans, new_spans = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag != "equal":
            old_spans.append((i1, i2))
            new_spans.append((j1, j2))
    return old_spans, new_spans


def _append_wrapped(text: Text, marker: str, line: str, width: int, rows: int, style: str = "",
                    emphasis: list[tuple[int, int]] = (), emphasis_style: str = "") -> None:
    """`line` wrapped to `width` behind a two-character marker, padded with blank rows to `rows` rows; the
    emphasised character ranges keep their style across the wrap."""
    pieces = _wrap(line, width)
    for index, piece in enumerate(pieces):
        start = len(text)
        text.append((marker if index == 0 else "↪ ") + piece + "\n", style=style)
        base = index * width
        for low, high in emphasis:
            low, high = max(low, base), min(high, base + len(piece))
            if low < high:
                text.stylize(emphasis_style, start + 2 + low - base, start + 2 + high - base)
    text.append("\n" * (rows - len(pieces)))


def split_diff_texts(old: str, new: str, app, width: int = 60) -> tuple[Text, Text]:
    """Two aligned columns `width` cells wide: left the previous turn, right this turn. Long lines wrap and the
    other side gets blank rows, so a row always faces its counterpart; changed characters of a replaced line
    are emphasised."""
    added, removed = theme_colour(app, "success"), theme_colour(app, "error")
    a, b = old.splitlines(), new.splitlines()
    body = max(8, width - 2)
    left, right = Text(no_wrap=True, overflow="crop"), Text(no_wrap=True, overflow="crop")
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            for old_line, new_line in zip(a[i1:i2], b[j1:j2]):
                rows = max(len(_wrap(old_line, body)), len(_wrap(new_line, body)))
                _append_wrapped(left, "  ", old_line, body, rows)
                _append_wrapped(right, "  ", new_line, body, rows)
            continue
        old_lines, new_lines = a[i1:i2], b[j1:j2]
        for k in range(max(len(old_lines), len(new_lines))):
            old_line = old_lines[k] if k < len(old_lines) else None
            new_line = new_lines[k] if k < len(new_lines) else None
            old_spans, new_spans = _changed_spans(old_line, new_line) if tag == "replace" and \
                old_line is not None and new_line is not None else ([], [])
            rows = max(len(_wrap(old_line or "", body)) if old_line is not None else 0,
                       len(_wrap(new_line or "", body)) if new_line is not None else 0)
            for text, line, marker, style, spans in ((left, old_line, "- ", removed, old_spans),
                                                     (right, new_line, "+ ", added, new_spans)):
                if line is None:
                    text.append("\n" * rows)
                else:
                    _append_wrapped(text, marker, line, body, rows, style, spans, f"bold reverse {style}")
    return left, right


class KernelView(VerticalScroll):
    """Shows `source` as code, or diffed against `previous` (None on the first turn)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.mode = "code"
        self._source, self._previous, self._language = "", None, "python"

    def compose(self) -> ComposeResult:
        yield Static(id="kernel-code")
        with Horizontal(id="kernel-split"):
            yield Static(id="kernel-left")
            yield Static(id="kernel-right")

    def show(self, source: str, previous: Optional[str], language: str = "", mode: Optional[str] = None) -> None:
        self._source, self._previous = source, previous
        self._language = language or kernel_language(source)
        if mode:
            self.mode = mode
        self._refresh_view()

    def on_resize(self) -> None:
        if self.mode == "split" and self._previous is not None:
            self._refresh_view()

    def set_mode(self, mode: str) -> None:
        self.mode = mode
        self._refresh_view()

    def _refresh_view(self) -> None:
        code, split = self.query_one("#kernel-code", Static), self.query_one("#kernel-split")
        split.display = False
        code.display = True
        if not self._source:
            code.update(Text("(this turn produced no kernel)", style="italic"))
            return
        if self.mode == "code" or self._previous is None:
            theme = "monokai" if self.app.current_theme.dark else "default"
            code.update(Syntax(self._source, lexer_for(self._language), theme=theme, line_numbers=True, word_wrap=False,
                               background_color=self.app.theme_variables.get("surface")))
            if self.mode != "code":
                self.border_subtitle = "first turn: nothing to diff"
            else:
                self.border_subtitle = f"{self._language}"
            return
        self.border_subtitle = f"diff vs previous turn ({self.mode})"
        if self.mode == "unified":
            code.update(unified_diff_text(self._previous, self._source, self.app))
            return
        # Each column gets half the pane less the scrollbar, so wrapped rows stay level on both sides.
        width = max(24, (self.size.width or self.app.size.width) // 2 - 2)
        left, right = split_diff_texts(self._previous, self._source, self.app, width)
        code.display = False
        split.display = True
        self.query_one("#kernel-left", Static).update(left)
        self.query_one("#kernel-right", Static).update(right)
