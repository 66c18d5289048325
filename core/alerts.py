"""Alert rules and the state that decides when they fire: a run reaching a status (`crashed`, `finished`, …) or a
metric expression becoming true (`env/all/reward/total > 0.5`). Pure: the TUI feeds it observations and rings."""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence

from core.errors import KrlError

STATUSES = ("crashed", "failed", "finished", "stopped", "running", "queued")
DEFAULT_RULES = ("crashed", "failed", "finished")
OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt, "<": operator.lt}
_EXPRESSION = re.compile(r"^\s*(?P<key>[^\s<>=!]+)\s*(?P<op>>=|<=|==|!=|>|<)\s*(?P<value>[-+0-9.eE]+|nan|inf)\s*$")


@dataclass(frozen=True)
class Rule:
    """`status` rules name a run status; `metric` rules compare a metric's latest value with a threshold."""

    text: str
    kind: str  # status | metric
    key: str  # the status, or the metric key
    op: str = ""
    threshold: float = 0.0

    def holds(self, status: str, metrics: dict[str, float]) -> Optional[bool]:
        """True/False, or None when it cannot be told yet (the metric was never logged)."""
        if self.kind == "status":
            return status == self.key
        value = metrics.get(self.key)
        if value is None:
            return None
        return OPERATORS[self.op](value, self.threshold)


def parse_rule(text: str) -> Rule:
    """'crashed' → a status rule; 'env/all/reward/total > 0.5' → a metric rule; anything else is a user error."""
    clean = " ".join(text.split())
    if clean.lower() in STATUSES:
        return Rule(clean.lower(), "status", clean.lower())
    match = _EXPRESSION.match(clean)
    if match is None:
        raise KrlError(f"alert rule {text!r} is neither a status ({', '.join(STATUSES)}) nor a metric expression "
                       "like 'env/all/reward/total > 0.5' (operators: > >= < <= == !=).")
    try:
        threshold = float(match["value"])
    except ValueError:
        raise KrlError(f"alert rule {text!r}: {match['value']!r} is not a number.") from None
    return Rule(f"{match['key']} {match['op']} {match['value']}", "metric", match["key"], match["op"], threshold)


def parse_rules(texts: Iterable[str]) -> tuple[list[Rule], list[str]]:
    """(the rules that parse, an error message for each that does not): a bad saved rule must not stop the rest."""
    rules, errors = [], []
    for text in texts:
        try:
            rules.append(parse_rule(text))
        except KrlError as exc:
            errors.append(str(exc))
    return rules, errors


@dataclass(frozen=True)
class Alert:
    time: float
    run_id: int
    run_name: str
    rule: str
    message: str
    severity: str  # information | warning | error


class AlertState:
    """Fires a rule for a run when it turns true, never for what was already true when first seen (opening the TUI
    on a workspace of finished runs rings nothing). A rule fires again only after it was false in between."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = list(rules)
        self._last: dict[tuple[int, str], Optional[bool]] = {}
        self._seen: set[int] = set()

    def metric_keys(self) -> list[str]:
        return sorted({r.key for r in self.rules if r.kind == "metric"})

    def observe(self, run_id: int, run_name: str, status: str, metrics: dict[str, float], now: float) -> list[Alert]:
        first = run_id not in self._seen
        self._seen.add(run_id)
        fired = []
        for rule in self.rules:
            state = rule.holds(status, metrics)
            before = self._last.get((run_id, rule.text))
            self._last[(run_id, rule.text)] = state
            if state and not before and not first:
                fired.append(Alert(now, run_id, run_name, rule.text, _message(rule, run_name, metrics),
                                   _severity(rule)))
        return fired


def _message(rule: Rule, run_name: str, metrics: dict[str, float]) -> str:
    if rule.kind == "status":
        return f"{run_name} {rule.key}"
    return f"{run_name}: {rule.key} = {metrics[rule.key]:.4g} ({rule.op} {rule.threshold:g})"


def _severity(rule: Rule) -> str:
    if rule.kind == "status":
        return "error" if rule.key in ("crashed", "failed") else "information"
    return "warning"
