"""Reward maths: components, hack penalty, stages, discounted returns and per-turn group advantages."""

from __future__ import annotations

import math

import pytest

from core.config import RewardConfig, RewardWeights, StageConfig, load_config
from core.env import parse_response
from core.reward import (StageSchedule, batch_advantages, discounted_returns, per_turn_advantages, score_turn,
                         speed_value)
from evaluator.api import EvalResult, RuntimeStats, Verdict

GOOD = ("<think>Elementwise max with zero; one thread per element, vectorised loads.</think>\n"
        "<KERNEL>\n```python\nclass ModelNew: pass\n```\n</KERNEL>")
ONLY_WEIGHT = {name: 0.0 for name in ("format", "compile", "correctness", "speed", "thinking", "length",
                                      "own_kernel_share")}


def result(verdict: Verdict, *, compiled=True, passed=0, total=5, speedup=None, hack_rule=None) -> EvalResult:
    return EvalResult(request_id="r", problem_id="builtin/relu", verdict=verdict, compiled=compiled,
                      correctness_trials_passed=passed, correctness_trials_total=total, speedup=speedup,
                      hack_rule=hack_rule)


def only(name: str, value: float = 1.0) -> dict[str, float]:
    return dict(ONLY_WEIGHT, **{name: value})


def test_own_kernel_share_is_an_optional_term_never_a_penalty_by_default():
    """An honest fusion keeps the GEMM in cuBLAS: its own kernels carry ~1% of GPU time. Weight 0 by default."""
    parsed = parse_response(GOOD)
    fusion = result(Verdict.CORRECT, passed=5, speedup=1.5)
    fusion.own_kernel_time_fraction = 0.02
    assert RewardWeights().own_kernel_share == 0.0
    default_score, breakdown = score_turn(parsed, fusion, RewardConfig())
    assert breakdown["own_kernel_share"] == 0.0
    assert score_turn(parsed, fusion, RewardConfig(), only("own_kernel_share"))[0] == pytest.approx(0.02)
    wrong = result(Verdict.WRONG_OUTPUT)
    wrong.own_kernel_time_fraction = 0.9
    assert score_turn(parsed, wrong, RewardConfig(), only("own_kernel_share"))[0] == 0.0


def test_speed_modes():
    assert speed_value(2.0, "log", 10) == pytest.approx(math.log(2))
    assert speed_value(0.8, "log", 10) == pytest.approx(math.log(0.8))
    assert speed_value(0.1, "log", 10) == -0.5 and speed_value(0.1, "log", 10, floor=-3) == pytest.approx(math.log(0.1))
    assert speed_value(0.2, "minus_one", 10) == -0.5
    assert speed_value(50.0, "clipped", 10) == 10
    assert speed_value(3.0, "minus_one", 10) == pytest.approx(2.0)
    assert speed_value(None, "log", 10) == 0.0 and speed_value(float("nan"), "log", 10) == 0.0


def test_speed_counts_only_for_correct_kernels():
    cfg = RewardConfig()
    parsed = parse_response(GOOD)
    fast_wrong = result(Verdict.WRONG_OUTPUT, speedup=5.0)
    fast_right = result(Verdict.CORRECT, passed=5, speedup=4.0)
    assert score_turn(parsed, fast_wrong, cfg, only("speed"))[0] == 0.0
    assert score_turn(parsed, fast_right, cfg, only("speed"))[0] == pytest.approx(math.log(4.0))


def test_a_slow_correct_kernel_beats_any_wrong_one():
    cfg = RewardConfig()
    parsed = parse_response(GOOD)
    slow_right = score_turn(parsed, result(Verdict.CORRECT, passed=5, speedup=0.01), cfg)[0]
    wrong = score_turn(parsed, result(Verdict.WRONG_OUTPUT, passed=4), cfg)[0]
    assert slow_right > wrong


def test_shaping_applies_to_incorrect_kernels():
    cfg = RewardConfig()
    parsed = parse_response(GOOD)
    score, breakdown = score_turn(parsed, result(Verdict.WRONG_OUTPUT, passed=2), cfg,
                                  {"format": 0.2, "compile": 0.3, "correctness": 1, "speed": 1, "thinking": 0.1})
    assert breakdown["format"] == pytest.approx(0.2) and breakdown["compile"] == pytest.approx(0.3)
    assert breakdown["thinking"] == pytest.approx(0.1) and breakdown["correctness"] == 0
    assert score == pytest.approx(0.6) and breakdown["total"] == pytest.approx(score)
    not_compiled = score_turn(parsed, result(Verdict.COMPILE_ERROR, compiled=False), cfg, only("compile"))[0]
    assert not_compiled == 0.0


def test_correctness_binary_and_partial_credit():
    parsed = parse_response(GOOD)
    wrong = result(Verdict.WRONG_OUTPUT, passed=3, total=5)
    assert score_turn(parsed, wrong, RewardConfig(), only("correctness"))[0] == 0.0
    assert score_turn(parsed, wrong, RewardConfig(partial_credit=True), only("correctness"))[0] == pytest.approx(0.6)
    right = result(Verdict.CORRECT, passed=5, total=5)
    assert score_turn(parsed, right, RewardConfig(partial_credit=True), only("correctness"))[0] == 1.0


def test_hack_scores_exactly_minus_penalty():
    cfg = RewardConfig(hack_penalty=2.5)
    score, breakdown = score_turn(parse_response(GOOD), result(Verdict.HACK_DETECTED, hack_rule="calls_reference"),
                                  cfg, RewardWeights())
    assert score == -2.5 and breakdown["hack"] == -2.5 and breakdown["format"] == 0.0


def test_format_credit_full_fallback_and_none():
    cfg = RewardConfig(fallback_format_credit=0.5)
    res = result(Verdict.WRONG_OUTPUT)
    assert score_turn(parse_response(GOOD), res, cfg, only("format"))[0] == 1.0
    assert score_turn(parse_response("```python\nx=1\n```"), res, cfg, only("format"))[0] == 0.5
    assert score_turn(parse_response("no code"), None, cfg, only("format"))[0] == 0.0


def test_thinking_must_be_non_trivial():
    cfg = RewardConfig(thinking_min_chars=20)
    res = result(Verdict.WRONG_OUTPUT)
    short = parse_response("<think>ok</think><KERNEL>```python\nx\n```</KERNEL>")
    assert score_turn(short, res, cfg, only("thinking"))[0] == 0.0
    assert score_turn(parse_response(GOOD), res, cfg, only("thinking"))[0] == 1.0


def test_length_penalty_beyond_budget_and_on_truncation():
    cfg = RewardConfig(length_budget_tokens=100)
    parsed = parse_response(GOOD)
    res = result(Verdict.WRONG_OUTPUT)
    assert score_turn(parsed, res, cfg, only("length"), response_tokens=100)[0] == 0.0
    assert score_turn(parsed, res, cfg, only("length"), response_tokens=150)[0] == pytest.approx(-0.5)
    assert score_turn(parsed, res, cfg, only("length"), response_tokens=10_000)[0] == -1.0
    truncated = parse_response(GOOD, truncated=True)
    assert score_turn(truncated, res, cfg, only("length"), response_tokens=10)[0] == -1.0


def test_stage_schedule_switches_weights_by_step():
    base = RewardWeights()
    schedule = StageSchedule(base, [
        StageConfig(start_step=0, name="format", weights={"format": 1.0, "compile": 0, "correctness": 0, "speed": 0}),
        StageConfig(start_step=3, name="compile", weights={"compile": 1.0, "correctness": 0, "speed": 0}),
        StageConfig(start_step=6, name="correctness", weights={"speed": 0}),
        StageConfig(start_step=9, name="speed"),
    ])
    assert [schedule.stage_at(s).name for s in (0, 2, 3, 5, 6, 9, 100)] == \
        ["format", "format", "compile", "compile", "correctness", "speed", "speed"]
    assert schedule.weights_at(1).format == 1.0 and schedule.weights_at(1).correctness == 0
    assert schedule.weights_at(4).compile == 1.0 and schedule.weights_at(4).format == base.format
    assert schedule.weights_at(9) == base
    assert schedule.metrics(7)["reward/stage"] == 2.0 and schedule.metrics(7)["reward/weight/speed"] == 0
    assert schedule.switched_at(3).name == "compile" and schedule.switched_at(4) is None
    assert schedule.switched_at(0) is None


def test_stage_schedule_without_stages_and_late_first_stage():
    assert StageSchedule(RewardWeights()).stage_at(50).name == "default"
    late = StageSchedule.from_config(load_config("demo", ["stages=[{start_step: 4, name: speed, weights: {speed: 2}}]"]))
    assert late.stage_at(3).name == "default" and late.weights_at(4).speed == 2.0


def test_discounted_returns():
    assert discounted_returns([1.0, 0.0, 2.0], gamma=0.5) == pytest.approx([1.5, 1.0, 2.0])
    assert discounted_returns([]) == []
    assert discounted_returns([0.0, 0.0, 1.0]) == pytest.approx([0.16, 0.4, 1.0])  # default gamma 0.4


def test_solving_on_turn_one_beats_solving_on_turn_three():
    fail, solve = 0.2, 2.0
    early = [solve]  # early stop on success: one turn
    late = [fail, fail, solve]
    r_early, r_late = discounted_returns(early), discounted_returns(late)
    assert r_early[0] > r_late[0]
    group = per_turn_advantages([early, late, [fail, fail, fail, fail]])
    assert not group.dropped
    assert group.advantages[0][0] > group.advantages[1][0] > group.advantages[2][0]
    assert group.advantages[0][0] > 0
    # Even without early stop, a sample that keeps solving from turn 1 beats one that solves at turn 3.
    group = per_turn_advantages([[solve, solve, solve], [fail, fail, solve]])
    assert group.advantages[0][0] > 0 > group.advantages[1][0]


def test_advantage_baseline_is_per_turn_over_samples_that_reached_it():
    group = per_turn_advantages([[1.0], [0.0, 1.0], [0.0, 0.0]], gamma=0.0)
    # turn 0: returns 1, 0, 0 -> mean 1/3; turn 1: only samples 1 and 2 -> mean 0.5
    assert group.returns == [[1.0], [0.0, 1.0], [0.0, 0.0]]
    assert group.advantages[0] == pytest.approx([2 / 3])
    assert group.advantages[1] == pytest.approx([-1 / 3, 0.5])
    assert group.advantages[2] == pytest.approx([-1 / 3, -0.5])
    assert group.n_datums == 5


def test_leave_one_out_and_std_normalisation():
    scores = [[1.0], [0.0], [0.0], [0.0]]
    loo = per_turn_advantages(scores, gamma=0.0, leave_one_out=True)
    assert [a[0] for a in loo.advantages] == pytest.approx([1.0, -1 / 3, -1 / 3, -1 / 3])
    norm = per_turn_advantages(scores, gamma=0.0, normalise_std=True)
    std = math.sqrt(3 / 16)  # population std of 1, 0, 0, 0
    assert norm.advantages[0][0] == pytest.approx(0.75 / std, rel=1e-4)
    assert norm.advantages[1][0] == pytest.approx(-0.25 / std, rel=1e-4)
    plain = per_turn_advantages(scores, gamma=0.0)
    assert plain.advantages[0][0] == pytest.approx(0.75)


def test_constant_groups_are_dropped_and_counted():
    constant = per_turn_advantages([[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]])
    assert constant.dropped and constant.n_datums == 0 and "equal" in constant.reason
    assert all(a == 0.0 for row in constant.advantages for a in row)
    # Equal first turns but different second turns still carry signal.
    varied = per_turn_advantages([[0.5, 0.0], [0.5, 1.0]])
    assert not varied.dropped
    batch = batch_advantages([[[1.0], [1.0]], [[1.0], [0.0]], [[0.0], [0.0]]], RewardConfig())
    assert batch.n_dropped == 2 and batch.n_kept == 1
    metrics = batch.metrics()
    assert metrics["env/all/groups_dropped"] == 2 and metrics["env/all/frac_groups_dropped"] == pytest.approx(2 / 3)


def test_runtime_stats_do_not_affect_speed_without_speedup():
    res = result(Verdict.CORRECT, passed=5, speedup=None)
    res.kernel_runtime = RuntimeStats(1, 1, 0, 1, 1, 0, 10)
    assert score_turn(parse_response(GOOD), res, RewardConfig(), only("speed"))[0] == 0.0
