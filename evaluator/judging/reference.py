"""The one loader of a reference problem: its source run as a fresh module, with the size overrides applied to its
globals. Runs on the trusted side only (judge host, baseline process); candidate code never passes through here."""

from __future__ import annotations

import types
from typing import Optional

PROBLEM_PARTS = ("Model", "get_inputs", "get_init_inputs")


def load_reference(source: str, size_overrides: Optional[dict] = None, name: str = "krl_reference") -> types.ModuleType:
    """The problem source executed as module `name`. Exceptions of the source itself propagate to the caller, who
    decides whose fault they are."""
    module = types.ModuleType(name)
    module.__file__ = "<reference>"
    exec(compile(source, "<reference>", "exec"), module.__dict__)
    # The size knob: get_inputs()/get_init_inputs() read these module globals at call time.
    for key, value in (size_overrides or {}).items():
        setattr(module, key, value)
    return module


def missing_parts(module: types.ModuleType) -> list[str]:
    """The parts every problem must define (Model, get_inputs, get_init_inputs) that this one lacks."""
    return [part for part in PROBLEM_PARTS if not hasattr(module, part)]
