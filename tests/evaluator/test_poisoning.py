"""Kernel poisoning (custom_kernel_unused) never calls an honest kernel unused: output buffers that already held the
result, normalising kernels, the Triton interpreter's host copies; decoys are still caught. CPU, real evaluator."""

from __future__ import annotations

import math

import pytest

from evaluator.api import EvalRequest, Verdict
from evaluator.judging.rules import runtime
from tests.bench.bench_timing_under_load import RMSNORM_TRITON, SOFTMAX_TRITON
from tests.evaluator.candidates.harness import builtin, candidate
from tests.evaluator.pool_support import make_evaluator

# Sizes where the honest kernels were judged custom_kernel_unused in CPU mode (hidden 96: a masked 128-wide block).
RMSNORM = ("rmsnorm", RMSNORM_TRITON, {"BATCH": 2, "SEQ": 4, "HIDDEN": 96})
SOFTMAX = ("softmax", SOFTMAX_TRITON, {"BATCH": 4, "DIM": 64})
DECOY = ("relu", candidate("hack_decoy_triton.py"), {"BATCH": 4, "DIM": 64})
REPEATS = 4  # the false verdict came in about one evaluation in three to eight


def _request(rid: str, problem: str, source: str, sizes: dict) -> EvalRequest:
    return EvalRequest(request_id=rid, problem_id=f"poison/{problem}", reference_source=builtin(problem),
                       candidate_source=source, backend="triton", size_overrides=sizes, correctness_trials=2,
                       timing_trials=2, warmup_trials=1, run_timeout_s=120.0)


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    cases = [RMSNORM, SOFTMAX, DECOY]
    requests = [_request(f"{problem}-{i}", problem, source, sizes)
                for i in range(REPEATS) for problem, source, sizes in cases]
    with make_evaluator(str(tmp_path_factory.mktemp("cache"))) as ev:
        results = list(ev.evaluate_many(requests))
    return {r.request_id: r for r in results}


@pytest.mark.parametrize("problem", ["rmsnorm", "softmax"])
def test_honest_normalising_triton_kernels_are_correct_every_time(verdicts, problem):
    got = [(verdicts[f"{problem}-{i}"].verdict, verdicts[f"{problem}-{i}"].error_message[:200]) for i in range(REPEATS)]
    assert got == [(Verdict.CORRECT, "")] * REPEATS


def test_decoy_triton_kernel_is_still_caught_every_time(verdicts):
    for i in range(REPEATS):
        result = verdicts[f"relu-{i}"]
        assert result.verdict == Verdict.HACK_DETECTED and "custom_kernel_unused" in result.error_message


def test_fresh_output_buffers_cannot_already_hold_the_result_while_poisoning():
    """The root of the false verdict: a freed temporary holding this very result came back from torch.empty_like as
    the output buffer, so the kernel's write changed no value and went unseen. While poisoning, new memory is NaN."""
    import torch

    x = torch.randn(8)

    def kernel(src, dst):
        dst.copy_(src * 2)

    with runtime.KernelPoisoner(runtime.LaunchCounter(), [], 5000.0):
        out = torch.empty_like(x)
        assert bool(out.isnan().all()) and int(torch.empty(2, dtype=torch.int64)[0]) == torch.iinfo(torch.int64).max
        out.copy_(x * 2)  # even if it did hold the result (here by hand), the launch's write ...
        out = torch.empty_like(x)
        runtime.call_and_poison(kernel, (x, out), {}, 5000.0)
    assert bool((out >= 5000.0).all()) and not x.isnan().any()  # ... into a fresh buffer is seen and poisoned
    assert not torch.are_deterministic_algorithms_enabled()  # switches put back
    assert torch.utils.deterministic.fill_uninitialized_memory


def test_the_finite_poison_differs_per_element():
    import torch

    out = torch.zeros(64)
    runtime.call_and_poison(lambda dst: dst.fill_(1.0), (out,), {}, 5000.0)
    assert bool((out >= 5000.0).all()) and out.unique().numel() > 1  # a constant could be normalised away


def test_standard_library_modules_are_not_taken_for_candidate_extensions():
    assert not runtime._is_extension_module(math)
    assert not runtime._is_extension_function(math.prod)
