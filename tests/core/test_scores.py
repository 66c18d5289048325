"""core/scores.py against hand-computed tables: pass@k, both fast_p conventions (including where they differ),
per-turn and best-by-turn views, geometric means and the paired bootstrap."""

from __future__ import annotations

import math

import pytest

from core import scores
from core.scores import BEST_OF_N, KERNELBENCH, Outcome


def rec(pid, sample, turn, verdict, speedup=None, **extra):
    return {"problem_id": pid, "sample": sample, "turn": turn, "verdict": verdict, "speedup": speedup, **extra}


@pytest.mark.parametrize("n,c,k,expected", [
    (1, 1, 1, 1.0), (1, 0, 1, 0.0), (4, 1, 1, 0.25), (4, 2, 2, 1 - 1 / 6), (5, 1, 2, 1 - 6 / 10),
    (10, 3, 5, 1 - 21 / 252), (4, 3, 2, 1.0), (4, 0, 4, 0.0)])
def test_pass_at_k_unbiased_estimator(n, c, k, expected):
    assert scores.pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_rejects_k_outside_1_to_n():
    with pytest.raises(ValueError):
        scores.pass_at_k(2, 1, 3)
    with pytest.raises(ValueError):
        scores.pass_at_k(2, 1, 0)


# Problem a: sample 0 correct at 1.0x exactly, sample 1 correct at 2.0x.
# Problem b: sample 0 wrong, sample 1 correct at 1.5x.
# Problem c: sample 0 correct at 1.3x.  Problem d: in the set but never evaluated.
TABLE = [
    Outcome("a", 0, True, 1.0), Outcome("a", 1, True, 2.0),
    Outcome("b", 0, False, None), Outcome("b", 1, True, 1.5),
    Outcome("c", 0, True, 1.3),
]
PROBLEMS = ["a", "b", "c", "d"]


def test_fast_p_conventions_differ_where_they_should():
    # KernelBench: first samples only, strictly faster: a (1.0 > 1 no), b (wrong), c (1.3 yes), d missing -> 1/4.
    assert scores.fast_p(TABLE, 1.0, KERNELBENCH, PROBLEMS) == pytest.approx(1 / 4)
    # Best of n, >=: a (2.0), b (1.5), c (1.3) -> 3/4.
    assert scores.fast_p(TABLE, 1.0, BEST_OF_N, PROBLEMS) == pytest.approx(3 / 4)
    # p = 0 is the correct rate: KernelBench first samples a, c -> 2/4; best of n a, b, c -> 3/4.
    assert scores.fast_p(TABLE, 0.0, KERNELBENCH, PROBLEMS) == pytest.approx(2 / 4)
    assert scores.fast_p(TABLE, 0.0, BEST_OF_N, PROBLEMS) == pytest.approx(3 / 4)
    # The tie at exactly p: a's first sample at 1.0x; best-of-n counts a via its 2.0x sample; at p = 2 only a counts.
    assert scores.fast_p(TABLE, 2.0, BEST_OF_N, PROBLEMS) == pytest.approx(1 / 4)
    assert scores.fast_p(TABLE, 2.0, KERNELBENCH, PROBLEMS) == 0.0
    # Without the full problem list, only evaluated problems count.
    assert scores.fast_p(TABLE, 1.0, KERNELBENCH) == pytest.approx(1 / 3)
    with pytest.raises(ValueError):
        scores.fast_p(TABLE, 1.0, "whatever")


def test_ties_count_only_for_best_of_n():
    tie = [Outcome("x", 0, True, 1.5)]
    assert scores.fast_p(tie, 1.5, BEST_OF_N) == 1.0
    assert scores.fast_p(tie, 1.5, KERNELBENCH) == 0.0


def test_mean_pass_at_k_over_the_table():
    # a: n=2 c=2 -> 1; b: n=2 c=1 -> pass@1 .5, pass@2 1; c: n=1 c=1 -> pass@1 1, pass@2 (n<k) 0; d: 0.
    assert scores.mean_pass_at_k(TABLE, 1, PROBLEMS) == pytest.approx((1 + 0.5 + 1 + 0) / 4)
    assert scores.mean_pass_at_k(TABLE, 2, PROBLEMS) == pytest.approx((1 + 1 + 0 + 0) / 4)


def test_geomean_speedup_over_correct_samples():
    assert scores.geomean_speedup(TABLE) == pytest.approx((1.0 * 2.0 * 1.5 * 1.3) ** 0.25)
    assert scores.geomean_speedup([Outcome("x", 0, False, None)]) is None


MULTI_TURN = [
    # p/0: wrong, then correct at 0.8x, then correct at 1.4x
    rec("p", 0, 0, "wrong_output"), rec("p", 0, 1, "correct", 0.8), rec("p", 0, 2, "correct", 1.4),
    # p/1: correct at 2.0x on turn 0 (early stop: no later turns), hack on nothing
    rec("p", 1, 0, "correct", 2.0),
    # q/0: correct at 1.1x, then a regression to compile_error, then wrong
    rec("q", 0, 0, "correct", 1.1), rec("q", 0, 1, "compile_error"), rec("q", 0, 2, "wrong_output"),
]


def test_per_turn_view_carries_finished_episodes_forward():
    turn0 = {(o.problem_id, o.sample): o for o in scores.at_turn(MULTI_TURN, 0)}
    assert turn0[("p", 0)].correct is False and turn0[("p", 1)].speedup == 2.0
    turn2 = {(o.problem_id, o.sample): o for o in scores.at_turn(MULTI_TURN, 2)}
    assert turn2[("p", 0)].speedup == 1.4
    assert turn2[("p", 1)].speedup == 2.0  # ended at turn 0, kept
    assert turn2[("q", 0)].correct is False  # its last turn was wrong


def test_best_by_turn_keeps_the_best_so_far():
    best1 = {(o.problem_id, o.sample): o for o in scores.best_by_turn(MULTI_TURN, 1)}
    assert best1[("p", 0)].speedup == 0.8 and best1[("q", 0)].speedup == 1.1
    best = {(o.problem_id, o.sample): o for o in scores.best_by_turn(MULTI_TURN)}
    assert best[("p", 0)].speedup == 1.4 and best[("q", 0)].correct is True


def test_summarise_by_hand():
    summary = scores.summarise(MULTI_TURN, ["p", "q", "r"], samples=2, turns=3)
    # Best-by-turn outcomes: p/0 1.4, p/1 2.0, q/0 1.1; r missing.
    assert summary["pass@1"] == pytest.approx((1 + 1 + 0) / 3)
    assert summary["pass@2"] == pytest.approx((1 + 0 + 0) / 3)  # q has one sample only
    assert summary["fast_p/eager/kernelbench/1"] == pytest.approx(2 / 3)  # p/0 1.4 > 1, q/0 1.1 > 1
    assert summary["fast_p/eager/kernelbench/1.5"] == 0.0
    assert summary["fast_p/eager/best_of_n/1.5"] == pytest.approx(1 / 3)  # p via 2.0
    assert summary["geomean_speedup/eager"] == pytest.approx((1.4 * 2.0 * 1.1) ** (1 / 3))
    assert summary["turn0/correct_rate"] == pytest.approx(2 / 3)
    assert summary["turn2/correct_rate"] == pytest.approx(2 / 3)  # p/0 now correct, q/0 now wrong
    assert summary["best_turn2/correct_rate"] == 1.0
    assert summary["turn1/fast_1/kernelbench"] == 0.0  # p/0 0.8, q/0 compile error
    assert summary["correct_rate"] == pytest.approx(4 / 7)


def test_rates_counts_and_sol_fraction():
    records = [rec("a", 0, 0, "correct", 1.0, compiled=True, sol_fraction=0.5),
               rec("a", 1, 0, "correct", 1.0, compiled=True, sol_fraction=None),
               rec("a", 2, 0, "hack_detected", compiled=True, hack_rule="cached_output"),
               rec("a", 3, 0, "compile_error", compiled=False)]
    out = scores.rates(records)
    assert out == {"compile_rate": 0.75, "correct_rate": 0.5, "hack_rate": 0.25, "sol_fraction_mean": 0.5}
    assert scores.counts(records, "verdict") == {"compile_error": 1, "correct": 2, "hack_detected": 1}
    assert scores.counts(records, "hack_rule") == {"cached_output": 1}


def test_paired_bootstrap_identical_sides_give_zero():
    a = {str(i): float(i % 2) for i in range(20)}
    interval = scores.paired_bootstrap(a, dict(a), scores.mean, "fast_1")
    assert interval.difference == 0.0 and interval.low == 0.0 and interval.high == 0.0 and interval.n_problems == 20


def test_paired_bootstrap_interval_brackets_a_clear_improvement():
    a = {str(i): 0.0 for i in range(30)}
    b = {str(i): (1.0 if i < 24 else 0.0) for i in range(30)}
    b["extra"] = 1.0  # not shared: ignored
    interval = scores.paired_bootstrap(a, b, scores.mean, "fast_1", n_resamples=1000)
    assert interval.n_problems == 30 and interval.difference == pytest.approx(0.8)
    assert 0.6 < interval.low < 0.8 < interval.high <= 0.95


def test_paired_bootstrap_geomean_ratio():
    a = {"x": 1.0, "y": 2.0}
    b = {"x": 2.0, "y": 4.0}
    interval = scores.paired_bootstrap(a, b, scores.mean_log, "log_geomean_speedup", n_resamples=200)
    # Every problem doubled: the log-ratio is ln 2 on every resample.
    assert interval.difference == pytest.approx(math.log(2)) and interval.low == pytest.approx(math.log(2))
    assert scores.paired_bootstrap({"x": 1.0}, {"y": 1.0}, scores.mean, "none").n_problems == 0


def test_untimed_evaluations_still_report_eager_fast_p():
    # Timing off (or every timing failed): fast_0 is still the correct rate, faster-than-p is 0, never a missing key.
    records = [rec("a", 0, 0, "correct"), rec("b", 0, 0, "wrong_output")]
    summary = scores.summarise(records, ["a", "b"], samples=1, turns=1)
    assert summary["fast_p/eager/kernelbench/0"] == 0.5 and summary["fast_p/eager/kernelbench/1"] == 0.0
    assert "geomean_speedup/eager" not in summary
    assert not any(key.startswith("fast_p/compile/") for key in
                   scores.summarise(records, ["a", "b"], 1, 1, {"eager": "speedup", "compile": "speedup_compile"}))
