"""Alert rules: parsing statuses and metric expressions, user errors, and when a rule fires (on turning true while
watched, never for what was already true when first seen, again only after being false)."""

from __future__ import annotations

import pytest

from core.alerts import AlertState, parse_rule, parse_rules
from core.errors import KrlError


def test_parse_status_and_metric_rules():
    assert parse_rule(" Crashed ").kind == "status"
    rule = parse_rule("env/all/reward/total>0.5")
    assert (rule.kind, rule.key, rule.op, rule.threshold, rule.text) == \
        ("metric", "env/all/reward/total", ">", 0.5, "env/all/reward/total > 0.5")
    assert parse_rule("system/gpu0/mem_percent >= 95").op == ">="
    assert parse_rule("loss != -1e-3").threshold == -1e-3
    for bad in ("exploded", "reward >", "reward > high", "> 3", "a b > 1"):
        with pytest.raises(KrlError):
            parse_rule(bad)
    rules, errors = parse_rules(["finished", "nonsense", "x < 1"])
    assert [r.text for r in rules] == ["finished", "x < 1"] and len(errors) == 1 and "nonsense" in errors[0]


def test_rules_fire_on_turning_true_while_watched():
    state = AlertState([parse_rule("finished"), parse_rule("reward > 0.5"), parse_rule("crashed")])
    # First sight: an already finished run, an already high reward: nothing rings.
    assert state.observe(1, "old", "finished", {"reward": 0.9}, 0.0) == []
    assert state.observe(2, "live", "running", {}, 0.0) == []
    assert state.observe(2, "live", "running", {"reward": 0.4}, 1.0) == []
    fired = state.observe(2, "live", "running", {"reward": 0.6}, 2.0)
    assert [(a.rule, a.severity) for a in fired] == [("reward > 0.5", "warning")]
    assert "0.6" in fired[0].message and fired[0].run_name == "live"
    assert state.observe(2, "live", "running", {"reward": 0.7}, 3.0) == []  # still true: no second ring
    assert state.observe(2, "live", "running", {"reward": 0.2}, 4.0) == []
    assert [a.rule for a in state.observe(2, "live", "running", {"reward": 0.8}, 5.0)] == ["reward > 0.5"]
    fired = state.observe(2, "live", "crashed", {"reward": 0.8}, 6.0)
    assert [(a.rule, a.severity) for a in fired] == [("crashed", "error")]
    assert state.observe(1, "old", "finished", {"reward": 0.9}, 7.0) == []
