"""The judge's pure part: comparisons of real tensors (tables of known cases) and seeded, reproducible inputs."""

from __future__ import annotations

import dataclasses
import math
import types

import pytest
import torch

from evaluator.judging import judge
from evaluator.api import Verdict

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize("ref, new, verdict, max_diff", [
    ([1.0, 2.0], [1.0, 2.0], Verdict.CORRECT, 0.0),
    ([1.0, 2.0], [1.0, 2.0 + 1e-5], Verdict.CORRECT, 1e-5),  # within atol + rtol * |ref| = 1e-4 + 2e-4
    ([1.0, 2.0], [1.0, 2.001], Verdict.WRONG_OUTPUT, 1e-3),
    ([NAN, 1.0], [NAN, 1.0], Verdict.CORRECT, 0.0),  # NaN where the reference has NaN
    ([INF, 1.0], [INF, 1.0], Verdict.CORRECT, 0.0),
    ([1.0, 1.0], [NAN, 1.0], Verdict.WRONG_OUTPUT, 0.0),  # NaN where the reference is finite
    ([INF, 1.0], [-INF, 1.0], Verdict.WRONG_OUTPUT, 0.0),
], ids=["equal", "within", "outside", "nan_matches", "inf_matches", "nan_new", "inf_sign"])
def test_compare_values(ref, new, verdict, max_diff):
    result = judge.compare(torch.tensor(ref), torch.tensor(new), 1e-4, 1e-4)
    assert result.verdict == verdict
    assert result.max_abs_diff == pytest.approx(max_diff, abs=1e-6)
    assert result.ok == (verdict == Verdict.CORRECT)
    assert (result.message == "") == result.ok


@pytest.mark.parametrize("ref, new, verdict, words", [
    (torch.zeros(2, 3), torch.zeros(6), Verdict.SHAPE_MISMATCH, "expected [2, 3], got [6]"),
    (torch.zeros(2), torch.zeros(2, dtype=torch.float64), Verdict.WRONG_OUTPUT, "dtype"),
    ((torch.zeros(2), torch.ones(2)), (torch.zeros(2),), Verdict.SHAPE_MISMATCH, "a tuple of 2"),
    (torch.zeros(2), (torch.zeros(2),), Verdict.SHAPE_MISMATCH, "expected a tensor"),
    (torch.zeros(2), "zeros", Verdict.WRONG_OUTPUT, "is a str"),
    ((torch.zeros(2), torch.ones(2)), (torch.zeros(2), torch.zeros(2)), Verdict.WRONG_OUTPUT, "(output 1)"),
])
def test_compare_structure(ref, new, verdict, words):
    result = judge.compare(ref, new, 1e-4, 1e-4)
    assert result.verdict == verdict
    assert words in result.message


def test_compare_complex_and_integer_outputs():
    ref = torch.tensor([1 + 2j, 3 - 1j])
    assert judge.compare(ref, ref.clone(), 1e-4, 1e-4).ok
    assert not judge.compare(ref, ref.conj(), 1e-4, 1e-4).ok
    assert judge.compare(torch.tensor([3, 4]), torch.tensor([3, 4]), 0, 0).ok
    assert judge.compare(torch.tensor(2.0), 2.0, 1e-4, 1e-4).ok  # a Python number for a 0-d tensor


def test_comparison_is_a_frozen_record():
    result = judge.compare(torch.ones(3), torch.ones(3), 1e-4, 1e-4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.verdict = Verdict.WRONG_OUTPUT  # type: ignore[misc]


def test_outputs_identical_and_snapshot():
    a = torch.tensor([1.0, NAN])
    assert judge.outputs_identical(a, a.clone())
    assert not judge.outputs_identical(a, torch.tensor([1.0, 2.0]))
    assert not judge.outputs_identical((a,), (a, a))
    kept = judge.snapshot((a,))
    a.fill_(0.0)
    assert kept[0][0] == 1.0


PROBLEM = """
import torch
N = 8
def get_inputs():
    return [torch.randn(N, N), torch.randint(0, 4, (N,))]
"""


def _problem() -> types.ModuleType:
    module = types.ModuleType("problem")
    exec(PROBLEM, module.__dict__)
    return module


def test_make_inputs_is_seeded_and_casts_only_floats():
    problem = _problem()
    first, again = judge.make_inputs(problem, 7, "cpu"), judge.make_inputs(problem, 7, "cpu")
    assert all(torch.equal(x, y) for x, y in zip(first, again))
    assert not torch.equal(first[0], judge.make_inputs(problem, 8, "cpu")[0])
    half = judge.make_inputs(problem, 7, "cpu", "bf16")
    assert half[0].dtype == torch.bfloat16 and half[1].dtype == torch.int64


def test_trial_seeds_are_reproducible_and_distinct():
    seeds = judge.trial_seeds(42, 5)
    assert seeds == judge.trial_seeds(42, 5) and len(set(seeds)) == 5


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
def test_nudged_values_change_every_float_element_and_keep_the_domain(dtype):
    # What timed calls are given (a new set each): made on the tensor's device; here on the CPU.
    import torch

    dtype = getattr(torch, dtype)
    base = torch.rand(4096, dtype=dtype) + 0.5  # positive, as get_inputs' torch.rand
    signed = torch.randn(64, 64, dtype=dtype)
    index, flag = torch.arange(10), torch.tensor([True, False])
    values = [base, signed, index, flag, 3, None]
    first, again, other = (judge.nudged_values(values, seed) for seed in (11, 11, 12))
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])  # the same set, made again
    for nudged, original in ((first[0], base), (first[1], signed)):
        assert nudged.dtype == original.dtype and nudged.shape == original.shape
        relative = (nudged.double() / original.double() - 1).abs()
        assert float(relative.max()) <= judge.NUDGE * 1.01 + 2 ** -7  # at most the nudge, plus bf16's rounding
        assert float((nudged != original).double().mean()) > 0.85  # (nearly) every element moved
        assert torch.equal(torch.sign(nudged), torch.sign(original))
    assert float((first[0] != other[0]).double().mean()) > 0.85  # another seed, other values
    assert first[2] is index and first[3] is flag and first[4:] == [3, None]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_batchs_sets_in_bulk_take_the_gates_shift_after_their_draws_and_stay_within_the_nudge(dtype):
    # The GPU's bulk path (judge.nudged_in_bulk), here on the CPU: the gate's wait is queued only once every draw is,
    # so the draws run before the gate opens; the values depend on the shift, and each set is its own allocation.
    import torch

    dtype = getattr(torch, dtype)
    bases = [[torch.rand(256, dtype=dtype) + 0.5, torch.arange(4)], [torch.randn(16, 16, dtype=dtype), 7]]
    shift = torch.tensor([0.375])
    queued = []
    made = judge.nudged_in_bulk(bases, 5, 5, lambda: queued.append(len(queued)) or shift)
    assert queued == [0] and len(made) == 5
    assert all(torch.equal(a, b) for a, b in zip(made[2], judge.nudged_in_bulk(bases, 5, 5, shift)[2]))
    moved = judge.nudged_in_bulk(bases, 5, 5, torch.tensor([0.625]))
    for call, values in enumerate(made):
        base = bases[call % 2]
        nudged = values[0]
        assert nudged.dtype == dtype and nudged.shape == base[0].shape
        assert float((nudged.double() / base[0].double() - 1).abs().max()) <= judge.NUDGE * 1.01 + 2 ** -7
        assert float((nudged != moved[call][0]).double().mean()) > 0.85  # another shift, other values
        assert values[1] is base[1]  # what is not a float tensor is passed as it is
    assert made[0][0].data_ptr() != made[2][0].data_ptr()


def test_nudged_set_names_round_trip_and_nothing_else_parses():
    assert judge.parse_nudged_set(judge.nudged_set_name(2, 123456789)) == (2, 123456789)
    for name in ("timing-2", "nudged-2", "nudged-100-1", "nudged-1-12345678901", "nudged-1-2/../x"):
        assert judge.parse_nudged_set(name) is None
