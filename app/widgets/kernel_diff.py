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


def split_diff_texts(old: str, new: str, app) -> tuple[Text, Text]:
    """Two aligned columns: left the previous turn, right this turn; padding lines keep rows aligned."""
    added, removed = theme_colour(app, "success"), theme_colour(app, "error")
    a, b = old.splitlines(), new.splitlines()
    # no_wrap: a wrapped line would push one column out of step with the other.
    left, right = Text(no_wrap=True, overflow="ellipsis"), Text(no_wrap=True, overflow="ellipsis")
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            for line in a[i1:i2]:
                left.append(f"  {line}\n")
            for line in b[j1:j2]:
                right.append(f"  {line}\n")
            continue
        old_lines, new_lines = a[i1:i2], b[j1:j2]
        for k in range(max(len(old_lines), len(new_lines))):
            left.append(f"- {old_lines[k]}\n" if k < len(old_lines) else "\n", style=removed)
            right.append(f"+ {new_lines[k]}\n" if k < len(new_lines) else "\n", style=added)
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
        left, right = split_diff_texts(self._previous, self._source, self.app)
        code.display = False
        split.display = True
        self.query_one("#kernel-left", Static).update(left)
        self.query_one("#kernel-right", Static).update(right)
