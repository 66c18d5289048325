"""Metric-name filters as people type them: a glob (`env/*/reward*`, whole name) or a regular expression
(`^rate/`, searched anywhere). One function decides which, so the run detail and compare filter alike."""

from __future__ import annotations

import fnmatch
import re
from typing import Callable

# `*` or `?` after one of these is regex syntax (`.*`, `a+?`, `(x)?`, `[ab]*`, `\d*`); anywhere else it is a glob.
_REGEX_BEFORE_WILDCARD = set(".)]+*?}\\")


def is_glob(pattern: str) -> bool:
    """True when the pattern reads as a glob: it has a `*` or `?` that regex syntax would not put there."""
    for index, char in enumerate(pattern):
        if char in "*?" and (index == 0 or pattern[index - 1] not in _REGEX_BEFORE_WILDCARD):
            return True
    return False


def metric_matcher(pattern: str) -> Callable[[str], bool]:
    """A predicate over metric names; raises ValueError for an invalid regular expression."""
    pattern = pattern.strip()
    if not pattern:
        return lambda _key: True
    if is_glob(pattern):
        regex = re.compile(fnmatch.translate(pattern), re.IGNORECASE)
        return lambda key: regex.match(key) is not None
    try:
        regex = re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise ValueError(f"invalid pattern {pattern!r}: {exc}") from None
    return lambda key: regex.search(key) is not None
