"""The one exception type for errors a user can cause and fix.
The CLI prints its message without a traceback and exits with code 2."""

from __future__ import annotations

import difflib
from typing import Iterable


class KrlError(Exception):
    """A user-facing error: the message says what is wrong and what to do."""

    exit_code = 2


def did_you_mean(word: str, candidates: Iterable[str], n: int = 3) -> str:
    """' Did you mean: a, b?' when close matches exist, else ''."""
    close = difflib.get_close_matches(word, list(candidates), n=n, cutoff=0.5)
    return f" Did you mean: {', '.join(close)}?" if close else ""
