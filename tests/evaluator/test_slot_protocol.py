"""Issue 23's attacks on the slot's protocol and timing, one hostile candidate each under slot_attacks/, through the
real Evaluator in CPU mode with its sandbox: nothing a runner says may set a verdict, a speedup or our own failure."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from evaluator.contract.types import EvalRequest, EvalResult, Verdict
from evaluator.isolation.sandbox import get_sandbox
from evaluator.slot.reference_watch import FREEZE_ENV
from tests.evaluator.pool_support import GOOD, RELU_REFERENCE, make_evaluator, request

pytestmark = pytest.mark.skipif(get_sandbox().kind == "none", reason="no sandbox works on this machine")

ATTACKS = Path(__file__).resolve().parent / "slot_attacks"
TIMING_ATTACKS = ("timing_module_patch", "timing_frames", "input_class_swap", "allocator_mallopt")
PROTOCOL_ATTACKS = ("forged_result", "unsolicited_inputs", "fake_infrastructure_error", "nested_answer")
# A forged timing claimed 4.8x to 25x on this problem; an honest clamp_min measures about 1x (0.4-1.3x on a loaded
# 2-core machine, where the runner's order handling weighs on a 256-element ReLU).
FORGED_SPEEDUP = 3.0
STALL_LIMIT_S = 8.0
# A problem whose call (64 small ops, ~0.2 ms on one core here) costs ~10x the making of its value set (~25 us): work
# moved out of the charged batch then shows as a large speedup. On the ReLU problem making the sets costs more than
# the calls, so moving the calls out read under FORGED_SPEEDUP even where it was not charged.
RELU_FORWARD = "return x.clamp_min(0)"
HEAVY_FORWARD = "for _ in range(64):\n            x = torch.tanh(x * 1.5)\n        return x"
HEAVY_REFERENCE = f"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        {HEAVY_FORWARD}


def get_inputs():
    return [torch.randn(256)]


def get_init_inputs():
    return []
"""


def attack(name: str) -> str:
    return (ATTACKS / f"{name}.py").read_text()


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    ev = make_evaluator(str(tmp_path_factory.mktemp("cache")), cpu_workers=1, spare_per_device=0)
    yield ev
    ev.close()


@pytest.fixture(scope="module")
def results(evaluator):
    """Every attack but the stall, and an honest candidate before and after them, through one evaluator."""
    names = ["honest-before", *PROTOCOL_ATTACKS, *TIMING_ATTACKS, "honest-after"]
    sources = {name: GOOD if name.startswith("honest") else attack(name) for name in names}
    return {name: evaluator.evaluate(request(sources[name], request_id=name, run_timeout_s=60.0)) for name in names}


@pytest.mark.parametrize("name", PROTOCOL_ATTACKS)
def test_a_runner_speaking_out_of_turn_is_the_candidates_fault(results, name):
    result = results[name]
    assert result.verdict == Verdict.CRASHED, (result.verdict, result.error_message)
    assert "broke the judge's protocol" in result.error_message
    assert "infrastructure" not in result.error_message.lower()
    assert result.attempts == 1  # the candidate's fault: never retried as ours
    assert result.speedup is None


@pytest.mark.parametrize("name", TIMING_ATTACKS)
def test_timing_forged_in_the_candidates_process_does_not_move_the_speedup(results, name):
    result = results[name]
    if result.verdict == Verdict.CORRECT:
        assert result.speedup is not None and result.speedup < FORGED_SPEEDUP, result.speedup
    else:
        assert result.speedup is None


def test_honest_candidates_stay_correct_with_a_speed_measured_by_the_judge(results):
    for name in ("honest-before", "honest-after"):
        result = results[name]
        assert result.verdict == Verdict.CORRECT, result.error_message
        assert result.speedup is not None and 0 < result.speedup < FORGED_SPEEDUP
        assert result.timing_clock == "task_cpu"  # the kernel's account of the task's CPU time, not the runner's
        assert result.kernel_runtime is not None and result.reference_runtime is not None


def test_a_stalled_runner_ends_at_its_limit_and_the_next_request_still_works(evaluator, results):
    started = time.monotonic()
    stalled = evaluator.evaluate(request(attack("pipe_stall"), run_timeout_s=STALL_LIMIT_S, measure_timing=False))
    elapsed = time.monotonic() - started
    assert stalled.verdict == Verdict.TIMEOUT, (stalled.verdict, stalled.error_message)
    assert elapsed < STALL_LIMIT_S + 30  # generous for a loaded machine; before: 35 s against a 10 s limit
    after = evaluator.evaluate(request(GOOD, run_timeout_s=60.0))
    assert after.verdict == Verdict.CORRECT, after.error_message


def test_a_candidate_that_spins_in_its_timing_is_stopped_long_before_its_limit(evaluator, results):
    """Each timing order has a bound of its own, from the pace of the correctness trials: on a GPU the timing holds
    the device exclusive, so a hang there held every other slot's timing until the task's limit."""
    started = time.monotonic()
    spun = evaluator.evaluate(request(attack("spin_in_timing"), run_timeout_s=90.0))
    elapsed = time.monotonic() - started
    assert spun.verdict == Verdict.TIMEOUT, (spun.verdict, spun.error_message)
    assert "while being timed" in spun.error_message
    assert elapsed < 60  # the bound is ~5 s past the trials' pace; the task's limit, 90 s
    after = evaluator.evaluate(request(GOOD, run_timeout_s=60.0))
    assert after.verdict == Verdict.CORRECT, after.error_message


def hog_beside_the_reference(evaluator) -> EvalResult:
    """On the heavy problem (~0.3 ms a call here; its batches fill the ~5 ms target, where a ReLU's projection-bound
    rounds leave the judge's side ~1 ms, within one round's slack)."""
    heavy_body = "out = x\n        for _ in range(64):\n            out = torch.tanh(out * 1.5)"
    source = attack("hog_beside_reference").replace("out = x.clamp_min(0)", heavy_body)
    return evaluator.evaluate(EvalRequest(reference_source=HEAVY_REFERENCE, candidate_source=source,
                                          problem_id="test/heavy", correctness_trials=2, timing_trials=3,
                                          warmup_trials=1, run_timeout_s=60.0))


@pytest.mark.skipif(os.getuid() != 0, reason="per-task cgroups (and so their freezer) need root")
def test_a_process_left_working_beside_the_reference_is_frozen_out_of_its_windows(evaluator, results):
    """The runner's whole task group is frozen while the judge times the reference (slot/reference_watch.py): the
    hog's process never runs in a window, so none sees its CPU, and what it does elsewhere is charged to the candidate
    or to nobody's clock. Before, it was seen (side_work) or, on a loaded 2-core host, now and then unseen."""
    hog = hog_beside_the_reference(evaluator)
    assert hog.verdict == Verdict.CORRECT, (hog.verdict, hog.error_message)
    phases = hog.phase_times_s
    assert phases.get("timing_freeze", 0) > 0 and "timing_unfrozen_windows" not in phases, phases
    assert "timing_interfered_rounds" not in phases, phases
    assert hog.speedup < 1.05, hog.speedup


def test_with_the_freezer_off_the_watch_still_catches_it(tmp_path, monkeypatch):
    """Where the runner's group is not frozen (no cgroup, or KRL_WORKER_FREEZE_RUNNER=0) the judge reads the runner's
    CPU accounting around its timing of the reference: a process the candidate left working there is seen and the
    round timed again; the third such round ends the task `side_work`. (On a loaded host the process gets less of a
    core, and may touch fewer rounds than that: then only clean rounds count.) The windows are also judged together,
    made up to 30 ms of the judge's CPU (reference_watch.WatchedReference.check_watched_together)."""
    monkeypatch.setenv(FREEZE_ENV, "0")
    with make_evaluator(str(tmp_path), cpu_workers=1, spare_per_device=0) as evaluator:
        hog = hog_beside_the_reference(evaluator)
        after = evaluator.evaluate(request(GOOD, run_timeout_s=60.0))
    assert "timing_freeze" not in hog.phase_times_s
    if hog.verdict == Verdict.HACK_DETECTED:
        assert hog.hack_rule == "side_work" and "timing the reference" in hog.error_message, hog.error_message
    else:  # seen and timed again; or, rarely on a 2-core host where the kernel books CPU by 4 ms ticks, unseen
        # while it bought nothing: no more than identical code reads here (0.99-1.04 beside a spinning process since
        # the CPU timing's heap fix; an unseen hog read 0.91 and 1.02 in two of 13 runs, most beside a spinner)
        assert hog.verdict == Verdict.CORRECT, (hog.verdict, hog.error_message)
        assert hog.phase_times_s.get("timing_interfered_rounds", 0) >= 1 or hog.speedup < 1.05, hog.speedup
    assert after.verdict == Verdict.CORRECT, after.error_message
    assert "timing_interfered_rounds" not in after.phase_times_s


def test_skipping_the_batch_and_computing_only_the_picked_calls_gains_nothing(evaluator, results):
    result = evaluator.evaluate(request(attack("lazy_hand_over"), run_timeout_s=60.0))
    assert result.verdict != Verdict.CORRECT or result.speedup < FORGED_SPEEDUP, result.speedup


def test_skipping_the_batch_and_guessing_its_projections_is_caught_on_a_large_output(evaluator):
    # 0 for every call's projection, the picked calls computed when kept: at KernelBench's tolerances (1e-2, as fp16 and
    # bf16 requests have by default) on 65,536 elements the worst-case bound let it through, 0 being within a zero-mean
    # projection's reach; Hoeffding's bound on the tolerance does not.
    result = evaluator.evaluate(EvalRequest(
        reference_source=RELU_REFERENCE.format(n=65536), candidate_source=attack("guessed_projection"),
        problem_id="test/relu-64k", request_id="guessed-projection", correctness_trials=2, timing_trials=3,
        warmup_trials=1, run_timeout_s=60.0, atol=1e-2, rtol=1e-2))
    assert_stopped_in_timing(result)


def assert_stopped_in_timing(result) -> None:
    """Wrong by a projection, or (CPU mode, since session 28) crashed by its hand-over's digests: a runner that skipped
    its batch has no outputs to digest, and the picked ones it computed once named are not the batch's."""
    assert result.verdict in (Verdict.WRONG_OUTPUT, Verdict.CRASHED), (result.verdict, result.speedup,
                                                                      result.error_message)
    assert "while being timed" in result.error_message or "digest" in result.error_message, result.error_message


LINEAR_REFERENCE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(512, 512))

    def forward(self, x):
        return x @ self.weight


def get_inputs():
    return [torch.randn(16, 512)]


def get_init_inputs():
    return []
"""


def test_a_projection_folded_onto_the_values_of_a_linear_problem_is_caught(evaluator):
    # Skips the batch and answers each output's projection from its values through w @ W^T: 3.3-3.7x here while the
    # projection was linear in the output; sin(output) has no such fold. Honest code on the same problem stays correct.
    results = {name: evaluator.evaluate(EvalRequest(
        reference_source=LINEAR_REFERENCE, candidate_source=source, problem_id="test/linear", request_id=name,
        correctness_trials=2, timing_trials=3, warmup_trials=1, run_timeout_s=60.0))
        for name, source in (("forger", attack("fused_projection")),
                             ("honest", LINEAR_REFERENCE.replace("class Model(", "class ModelNew(")))}
    forger, honest = results["forger"], results["honest"]
    assert forger.verdict != Verdict.CORRECT or forger.speedup < FORGED_SPEEDUP, (forger.verdict, forger.speedup)
    assert honest.verdict == Verdict.CORRECT and honest.speedup < FORGED_SPEEDUP, (honest.verdict, honest.speedup)


def test_a_guessed_projection_is_caught_on_outputs_of_large_magnitude(evaluator):
    # The same guess on a matrix product at 1e-2: its outputs (magnitude ~20) let each element move ~0.2, wider than
    # sin's reach, and unscaled projections let it through on every call (correct at 2.2-2.4x, 3 of 3). The judge's
    # scale, drawn from its own reference output, brings them to a few radians.
    # guessed_projection.py's patches, then the honest matrix product as its ModelNew
    honest_matmul = LINEAR_REFERENCE.replace("class Model(", "class ModelNew(")
    matmul_guess = attack("guessed_projection").split("class ModelNew")[0] + honest_matmul
    results = {name: evaluator.evaluate(EvalRequest(
        reference_source=LINEAR_REFERENCE, candidate_source=source, problem_id="test/linear", request_id=name,
        correctness_trials=2, timing_trials=3, warmup_trials=1, run_timeout_s=60.0, atol=1e-2, rtol=1e-2))
        for name, source in (("guessed-projection-matmul", matmul_guess),
                             ("honest-matmul", honest_matmul))}
    guessed, honest = results["guessed-projection-matmul"], results["honest-matmul"]
    assert_stopped_in_timing(guessed)
    assert honest.verdict == Verdict.CORRECT, (honest.verdict, honest.error_message)


def heavy(name: str) -> EvalRequest:
    """An attack (or the honest candidate) on HEAVY_REFERENCE: its forward swapped for the heavy problem's."""
    source = GOOD if name == "honest" else attack(name)
    assert source.count(RELU_FORWARD) == 1, name
    return EvalRequest(reference_source=HEAVY_REFERENCE, candidate_source=source.replace(RELU_FORWARD, HEAVY_FORWARD),
                       problem_id="test/heavy", request_id=f"heavy-{name}", correctness_trials=2, timing_trials=3,
                       warmup_trials=1, run_timeout_s=90.0)


@pytest.fixture(scope="module")
def heavy_results(evaluator):
    """Work moved out of the charged batch, on a problem whose call costs far more than making its value set."""
    return {name: evaluator.evaluate(heavy(name)) for name in ("honest", "compute_at_stage", "deferred_batch")}


def test_the_heavy_problem_is_honestly_timed_near_1x(heavy_results):
    honest = heavy_results["honest"]
    assert honest.verdict == Verdict.CORRECT, honest.error_message
    assert honest.speedup is not None and 0 < honest.speedup < FORGED_SPEEDUP


def test_computing_the_batch_when_it_is_staged_gains_nothing(heavy_results):
    # Stage is not charged; the batch's values come only with the charged run order, so nothing can be computed early.
    # With the values sent at stage (the code before 07cb229) this attack read 31-35x here (1.9x on the ReLU problem).
    result = heavy_results["compute_at_stage"]
    assert result.verdict != Verdict.CORRECT or result.speedup < FORGED_SPEEDUP, result.speedup


def test_deferring_the_batch_into_the_hand_over_gains_nothing(heavy_results):
    # Computes every output only when the judge asks for their projection: charged there in full. With the candidate's
    # projection order left uncharged (TimingPhase.charged counting its batch alone) this read 15.5-16x here.
    result = heavy_results["deferred_batch"]
    assert result.verdict != Verdict.CORRECT or result.speedup < FORGED_SPEEDUP, result.speedup


# An honest candidate that writes every call's result into one buffer it keeps and returns it (an LLM pattern: no
# allocation per call). KernelBench calls it correct. A timed batch holds every call's output until the hand-over, so
# each would read as the last call's values: before, the judge took that for a replay (`hack_detected`).
REUSED_BUFFER = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = None

    def forward(self, x):
        if self.out is None or self.out.shape != x.shape:
            self.out = torch.empty_like(x)
        return torch.clamp_min(x, 0, out=self.out)
"""


def test_an_honest_candidate_reusing_one_output_buffer_is_correct(evaluator):
    result = evaluator.evaluate(request(REUSED_BUFFER, request_id="reused-buffer", run_timeout_s=60.0))
    assert result.verdict == Verdict.CORRECT, (result.verdict, result.error_message)
    assert result.speedup is not None and 0 < result.speedup < FORGED_SPEEDUP


def test_a_harness_rewritten_in_bulk_gains_nothing_where_the_harness_is_most_of_the_charge(evaluator):
    """A runner patched to make its value sets in bulk, call the kernel once over the whole batch and project from one
    buffer, every output exact: on a 256-element ReLU the harness is most of each side's charge, and the runner's is
    the candidate's code (2.24x; red team, session 28). Speedups are capped at 1 there; honest code stays correct."""
    results = {name: evaluator.evaluate(EvalRequest(
        reference_source=RELU_REFERENCE.format(n=256), candidate_source=source, problem_id="test/relu-256",
        request_id=name, correctness_trials=2, timing_trials=5, warmup_trials=1, run_timeout_s=60.0))
        for name, source in (("harness-in-bulk", attack("harness_in_bulk")),
                             ("honest-relu-256", RELU_REFERENCE.format(n=256).replace("class Model(", "class ModelNew(")))}
    forged, honest = results["harness-in-bulk"], results["honest-relu-256"]
    assert forged.verdict != Verdict.CORRECT or forged.speedup <= 1.0, (forged.verdict, forged.speedup)
    assert forged.phase_times_s.get("timing_speedup_capped") == 1, forged.phase_times_s
    assert honest.verdict == Verdict.CORRECT and honest.speedup <= 1.0, (honest.verdict, honest.speedup)
