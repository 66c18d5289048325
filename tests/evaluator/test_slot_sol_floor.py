"""The slot's speed-of-light hack floor (evaluator/slot/sol_floor.py): the decision on real results and a real judge's
problem cost in CPU mode (the floor itself only applies to GPUs), and the TF32 shortcut through the slot on a GPU."""

from __future__ import annotations

import pytest

from evaluator.contract.types import EvalRequest, EvalResult, RuntimeStats, Verdict
from evaluator.judging import sol
from evaluator.judging.reference_cache import ReferenceCache
from evaluator.slot import sol_floor
from evaluator.slot.outcome import TaskEnded
from evaluator.slot.task_judge import TaskJudge
from evaluator.slot.timing_phase import CLOCK_JUDGE_WALL, CLOCK_TASK_CPU
from tests.evaluator.candidates.harness import candidate, int_matmul_reference

H100 = "NVIDIA H100 80GB HBM3"
L2 = 50 << 20
N = 1024  # 2 * 1024^3 FLOPs: a floor of ~26 us on an H100, well above what the clock resolves
MATMUL = int_matmul_reference(N)


def timed(median_ms: float, clock: str = CLOCK_JUDGE_WALL, verdict: Verdict = Verdict.CORRECT) -> EvalResult:
    stats = RuntimeStats(median_ms=median_ms, mean_ms=median_ms, std_ms=0.0, min_ms=median_ms, max_ms=median_ms,
                         iqr_ms=0.0, n=7)
    return EvalResult(request_id="r", problem_id="p", verdict=verdict, kernel_runtime=stats, reference_runtime=stats,
                      speedup=1.0, timing_clock=clock)


@pytest.fixture(scope="module")
def judge(tmp_path_factory):
    """A real judge of an fp32 matmul with its first timing set made, as the slot's timing phase makes it."""
    folder = tmp_path_factory.mktemp("judge")
    (folder / "in").mkdir()
    (folder / "out").mkdir()
    request = EvalRequest(reference_source=MATMUL, candidate_source=candidate("matmul_torch.py"), problem_id="mm",
                          backend="torch")
    task = TaskJudge(request, "cpu", str(folder / "in"), str(folder / "out"), cache=ReferenceCache(64 << 20))
    task.make("timing-0")
    return task


def test_the_judge_counts_the_problem_once_from_its_own_reference(judge):
    cost = sol_floor.problem_cost(judge)
    assert cost is not None
    assert cost.flops + cost.tf32_flops == 2 * N ** 3
    assert cost.input_bytes == 2 * N * N * 4
    assert sol_floor.problem_cost(judge) is cost  # cached per problem in the judge's reference cache


def test_the_floor_is_the_in_process_one_less_what_the_l2_can_hold():
    spec = sol.device_spec(H100)
    compute_bound = sol.ProblemCost(flops=10 ** 12, tf32_flops=0, input_bytes=10 << 20, output_bytes=0,
                                    parameter_bytes=0)
    # 1 TFLOP at the 67 TFLOPS FP32 peak is ~14.9 ms: the L2 changes nothing for it
    assert sol_floor.floor_ms(compute_bound, spec, "fp32", L2) == pytest.approx(
        sol.hack_floor_ms(10 ** 12, 10 << 20, spec, "fp32"))
    streaming = sol.ProblemCost(flops=0, tf32_flops=0, input_bytes=1 << 30, output_bytes=0, parameter_bytes=0)
    expected = (1 - sol.SOL_MARGIN) * ((1 << 30) - L2) / (spec.memory_gbs * 1e9) * 1e3
    assert sol_floor.floor_ms(streaming, spec, "fp32", L2) == pytest.approx(expected)
    small = sol.ProblemCost(flops=0, tf32_flops=0, input_bytes=L2 - 1, output_bytes=0, parameter_bytes=0)
    assert sol_floor.floor_ms(small, spec, "fp32", L2) is None  # may all sit in L2: nothing physical to judge
    assert sol_floor.floor_ms(streaming, spec, "fp32", None) is None  # L2 size unknown: the bytes are left out


def test_only_a_correct_result_timed_by_the_judges_gpu_clock_is_judged():
    assert sol_floor.finding(timed(0.5), 1.0).rule == "below_speed_of_light"
    assert sol_floor.finding(timed(1.5), 1.0) is None
    assert sol_floor.finding(timed(0.5), None) is None
    assert sol_floor.finding(timed(0.5, clock=CLOCK_TASK_CPU), 1.0) is None  # CPU mode: no physical floor
    assert sol_floor.finding(timed(0.5, verdict=Verdict.WRONG_OUTPUT), 1.0) is None
    untimed = timed(0.5)
    untimed.kernel_runtime = None
    assert sol_floor.finding(untimed, 1.0) is None


def test_a_time_below_the_floor_ends_the_task_as_a_named_hack(judge):
    floor = sol_floor.floor_ms(sol_floor.problem_cost(judge), sol.device_spec(H100), "fp32", L2)
    assert floor == pytest.approx((1 - sol.SOL_MARGIN) * 2 * N ** 3 / 67e12 * 1e3)  # compute-bound at FP32 peak
    with pytest.raises(TaskEnded) as ended:
        sol_floor.check(judge, timed(floor / 2), H100, l2_bytes=L2)
    assert ended.value.verdict == Verdict.HACK_DETECTED and ended.value.hack_rule == "below_speed_of_light"
    assert "physically at least" in ended.value.message
    sol_floor.check(judge, timed(floor * 2), H100, l2_bytes=L2)  # a time the GPU can do: nothing
    sol_floor.check(judge, timed(floor / 2), "cpu", l2_bytes=L2)  # no device spec (CPU mode): nothing
    sol_floor.check(judge, timed(floor / 2, clock=CLOCK_TASK_CPU), H100, l2_bytes=L2)  # not the judge's GPU clock


@pytest.mark.gpu
def test_a_tf32_shortcut_through_the_slot_is_caught_and_honest_fp32_is_not(tmp_path):
    """Through the real slot on a GPU: an fp32 4096^3 matmul run on TF32 tensor cores beats the FP32 peak (the
    in-process path's tf32_shortcut case); on nudged timing values TF32 may instead be out of tolerance. Honest fp32
    stays correct."""
    import torch

    from tests.evaluator.pool_support import make_evaluator

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    big = int_matmul_reference(4096)
    evaluator = make_evaluator(str(tmp_path), devices="cuda:0")
    try:
        results = {name: evaluator.evaluate(EvalRequest(reference_source=big, candidate_source=candidate(file),
                                                        problem_id="mm", backend="torch", request_id=name,
                                                        correctness_trials=2, timing_trials=5, run_timeout_s=120.0))
                   for name, file in (("tf32", "hack_tf32_shortcut.py"), ("honest", "matmul_torch.py"))}
    finally:
        evaluator.close()
    tf32, honest = results["tf32"], results["honest"]
    assert (tf32.verdict, tf32.hack_rule) in {(Verdict.HACK_DETECTED, "below_speed_of_light"),
                                              (Verdict.WRONG_OUTPUT, None)}, (tf32.verdict, tf32.error_message)
    assert honest.verdict == Verdict.CORRECT, honest.error_message
