"""How one evaluation ends early inside a worker process (the in-process path and a slot's runner): a verdict raised as
Outcome, and the one place a rule's finding becomes one."""

from __future__ import annotations

from typing import Optional

from evaluator.contract.types import Verdict
from evaluator.judging import rules


class Outcome(Exception):
    """Ends an evaluation early with a verdict."""

    def __init__(self, verdict: Verdict, message: str = "", hack_rule: str | None = None):
        super().__init__(message)
        self.verdict = verdict
        self.message = message
        self.hack_rule = hack_rule


def hack(found: Optional[rules.Finding]) -> None:
    """The one place a rule's finding becomes a verdict."""
    if found is not None:
        raise Outcome(Verdict.HACK_DETECTED, found.message, found.rule)
