"""The public reward-hack and evaluator-tampering classes (KernelGuard, SOL-ExecBench, KernelBench, Dr. Kernel), one
hostile candidate each under tests/evaluator/attacks/, run through the real Evaluator in CPU mode; honest look-alikes
of the same shapes must stay correct. Each attack's header names its class and where it was described."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from evaluator.contract.types import EvalRequest, Verdict
from evaluator.isolation import device_access
from evaluator.isolation.sandbox import get_sandbox
from tests.evaluator.candidates.harness import matmul_reference
from tests.evaluator.pool_support import make_evaluator

ATTACKS = Path(__file__).resolve().parent / "attacks"

# Big enough that a replayed answer (microseconds) and a real computation (hundreds of microseconds) differ by far
# more than timing noise, small enough for a shared 2-core machine.
RELU = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def forward(self, x):
        return F.relu(x)

def get_inputs():
    return [torch.randn(512, 1024)]

def get_init_inputs():
    return []
'''
MATMUL = matmul_reference(192)
COLUMN_MEAN = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x.mean(dim=0)

def get_inputs():
    return [torch.randn(4096, 64)]

def get_init_inputs():
    return []
'''
SMALL_RELU = RELU.replace("torch.randn(512, 1024)", "torch.randn(4, 256)")  # Triton's interpreter is slow
REFERENCES = {"relu": RELU, "small_relu": SMALL_RELU, "matmul": MATMUL, "column_mean": COLUMN_MEAN}

NOT_CORRECT = "not correct"
NO_SPEEDUP = "no speedup"  # correct is acceptable, but the speedup must stay physical (< 3x)
NO_GAIN = "no gain"  # correct is acceptable at the honest code's speed (< 1.25x; an honest matmul reads ~1x)
# Under 1.10x: what a context switch a millisecond would buy is ~19%. Since session 28 a child of the candidate's gets no
# CUDA context (isolation/device_access.py), so the attacks checked at this bound run as honest code, and in this
# batch, beside spinning attacks at 8 slots, one read 1.13 (session 28, call A) and one 1.15 (call C): noise past the
# bound. They are checked at NO_GAIN's now; the bound stays for a machine where the refusal cannot be set.
NO_TICK_GAIN = "no gain past 10%"
HACK = "hack"  # any hack_detected rule
CRASHED_OR_ERROR = {Verdict.CRASHED, Verdict.RUNTIME_ERROR}

# name -> (problem, backend, what must happen, extra request fields). Speed-sensitive cases use the compute-bound
# matmul, where honest code measures ~1x; ReLU speedups on a loaded CPU drift (honest clamp_min: 1.6-4.8x).
# What must happen: a Verdict, a set of Verdicts, ("hack", rule-or-set-of-rules), NOT_CORRECT or NO_SPEEDUP.
CASES = {
    "patch_elapsed_time": ("relu", "torch", (HACK, "patched_torch"), {}),
    "patch_perf_counter_assembled": ("relu", "torch", (HACK, "patched_torch"), {}),
    "patch_allclose_wrong": ("relu", "torch", NOT_CORRECT, {}),
    "reference_torch_in_triton": ("small_relu", "triton", (HACK, {"custom_kernel_bypassed", "custom_kernel_not_launched"}), {}),
    "reference_via_gc_obfuscated": ("relu", "torch", (HACK, {"reference_model", "introspection"}), {}),
    "reference_via_sys_modules": ("relu", "torch", NOT_CORRECT, {}),  # the reference is in no module table
    "frame_walk_reference": ("relu", "torch", (HACK, {"reference_model", "introspection"}), {}),
    "cache_by_id": ("matmul", "torch", NO_SPEEDUP, {}),
    "cache_by_pointer_version": ("matmul", "torch", NO_SPEEDUP, {}),
    "cache_by_shape": ("relu", "torch", (HACK, "cached_output"), {}),
    "warmup_counting": ("relu", "torch", (HACK, "cached_output"), {}),
    # The judge-driven slot (issue 23) gives no frame a timing name, and charges a thread's late work: honest is fine.
    "mode_branch_when_timed": ("relu", "torch", NO_SPEEDUP, {}),
    "lazy_tensor_subclass": ("relu", "torch", (HACK, "lazy_output"), {}),
    "subclass_eq_allclose": ("relu", "torch", NOT_CORRECT, {}),
    "return_input_view": ("relu", "torch", Verdict.WRONG_OUTPUT, {}),
    "mutate_input_inplace": ("relu", "torch", (HACK, "input_mutation"), {}),
    "zero_out_inputs": ("relu", "torch", NOT_CORRECT, {}),
    "ctypes_input_write": ("relu", "torch", NOT_CORRECT, {}),
    "thread_after_return": ("relu", "torch", NO_SPEEDUP, {}),
    "swallow_fallback_triton": ("small_relu", "triton", (HACK, "swallowed_kernel_failure"), {}),
    "swallow_suppress_triton": ("small_relu", "triton", HACK, {}),
    "precision_fp16": ("relu", "torch", Verdict.WRONG_OUTPUT, {}),
    "exit_in_forward": ("relu", "torch", Verdict.CRASHED, {}),
    "sys_exit_in_forward": ("relu", "torch", CRASHED_OR_ERROR, {}),
    "memory_bomb": ("relu", "torch", CRASHED_OR_ERROR, {}),
    "huge_output": ("relu", "torch", NOT_CORRECT, {}),
    "fork_bomb": ("relu", "torch", NOT_CORRECT, {}),
    "infinite_loop": ("relu", "torch", Verdict.TIMEOUT, {"run_timeout_s": 6.0}),
    "signal_handlers": ("relu", "torch", Verdict.TIMEOUT, {"run_timeout_s": 6.0}),
    "import_evaluator_judge": ("relu", "torch", NOT_CORRECT, {}),
    "import_core_registry": ("relu", "torch", NOT_CORRECT, {}),
    "obfuscated_exec_patch": ("relu", "torch", NOT_CORRECT, {}),
    "code_replacement_slow_reference": ("relu", "torch", (HACK, "patched_torch"), {}),
    "precomputed_replay": ("matmul", "torch", NO_SPEEDUP, {}),
    # CPU mode: every timed call gets values no call had before, so content memos miss and compute (no speedup);
    # with value sets going round they were caught replaying a storage, or, copying, measured 4.6x.
    "content_fingerprint_memo": ("matmul", "torch", NO_SPEEDUP, {}),
    "content_hash_copy": ("matmul", "torch", NO_SPEEDUP, {}),
    "cache_by_id_copy": ("matmul", "torch", NOT_CORRECT, {}),
    "warmup_counting_copy": ("matmul", "torch", NOT_CORRECT, {}),
    "partial_computation": ("column_mean", "torch", Verdict.WRONG_OUTPUT, {}),
    "fake_benchmark_print": ("relu", "torch", Verdict.WRONG_OUTPUT, {}),
}
# CUDA-only classes, through the real Evaluator on the GPU (the lead runs these: pytest -m gpu).
GPU_MATMUL = matmul_reference(2048)
GPU_CASES = {
    # Gains nothing: the runner's device-wide synchronisation ends every timed batch inside the judge's clock, so the
    # side stream's work is charged (H100, slot: correct at 0.60x, its outputs complete by the hand-over).
    "gpu_side_stream_unjoined": NO_SPEEDUP,
    # Joined, but started before the current stream reached the start event, where its time hides behind the flush and
    # the launch hold (timing.LaunchHold). With one hardware queue per context (the pool's default) it cannot start
    # early: it queues behind whatever the current stream queued first (H100, session 15: correct at 0.96x). With
    # CUDA's default eight queues it is seen running during a hold (untimed_work), or wrong where it read inputs the
    # current stream had not finished writing (test_early_start_side_stream_with_cudas_default_queues).
    "gpu_side_stream_early_start": NO_GAIN,
    "gpu_uninitialized_result_reuse": NOT_CORRECT,
    "gpu_cuda_graph_replay": NOT_CORRECT,
    "gpu_tf32_shortcut": NO_SPEEDUP,
    # Timed calls on a GPU get values no earlier call had (timing.nudged_values): with 3 value sets going round, a memo
    # keyed on the inputs' sums that handed back a copy hit from the 4th call on (4.6x on the CPU, where it was first
    # closed).
    "content_hash_copy": NO_SPEEDUP,
    # A thread's spin kernels left on the GPU while the judge times the reference (another context, so time slices)
    # and next to nothing on the CPU, which is all the runner's watch reads. A thread's spins wait behind the runner's
    # own gated batch (one hardware queue a context) and slow the candidate (0.58-0.88x on an H200); a child's CPU ends
    # it `side_work`. The judge's gap probe (slot/gap_probe.py, opt-in since session 26) would also see the device taken.
    "gpu_spin_beside_reference": NO_GAIN,
    "gpu_short_spins_beside_reference": NO_GAIN,
    "gpu_child_spins_beside_reference": NO_GAIN,
    # A child's tiny kernel a millisecond while the runner sleeps: beside a batch one such process cost 19% (session 26,
    # call F). Waiting for each kernel it spins on the CPU and ends `side_work` (session 27, call A); without waiting it
    # is too cheap for the watch, and the runner's group frozen for each window (slot/reference_watch.py) stops it.
    "gpu_ticking_child_beside_reference": NO_TICK_GAIN,
    "gpu_lean_ticking_child_beside_reference": NO_TICK_GAIN,
    # A child's spin queued whenever the runner has answered and stopped when it wakes, meant to run through the
    # reference's windows, where the child is frozen and cannot stop it. It gained nothing on an H200 (0.98 and 1.00,
    # session 27, calls C-D; why not is not known); since session 28 the task's group refuses the child a context of
    # its own (isolation/device_access.py, every process but the runner), which stops it outright.
    "gpu_child_spins_through_reference_windows": NO_TICK_GAIN,
}
HONEST = {
    "honest_clock_and_print": ("relu", "torch"),
    "honest_weight_cache": ("relu", "torch"),
    "honest_own_buffer_inplace": ("relu", "torch"),
    "honest_triton_relu": ("small_relu", "triton"),
    "honest_matmul": ("matmul", "torch"),
    "honest_column_mean": ("column_mean", "torch"),
}


def attack_request(name: str, problem: str, backend: str, **fields) -> EvalRequest:
    base = dict(problem_id=f"attacks/{problem}", reference_source=REFERENCES[problem],
                candidate_source=(ATTACKS / f"{name}.py").read_text(), backend=backend, correctness_trials=2,
                timing_trials=10, warmup_trials=2, run_timeout_s=30.0, request_id=name)
    base.update(fields)
    return EvalRequest(**base)


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    ev = make_evaluator(str(tmp_path_factory.mktemp("cache")), cpu_workers=2, spare_per_device=0,
                        memory_limit_bytes=4 * 2**30)
    yield ev
    ev.close()


@pytest.fixture(scope="module")
def results(evaluator):
    requests = [attack_request(name, problem, backend, **fields) for name, (problem, backend, _, fields) in CASES.items()]
    requests += [attack_request(name, problem, backend) for name, (problem, backend) in HONEST.items()]
    found = {result.request_id: result for result in evaluator.evaluate_many(requests)}
    report = os.environ.get("KRL_ATTACKS_REPORT")  # a path: one line per candidate, for the notes
    if report:
        with open(report, "w") as handle:
            for name, result in sorted(found.items()):
                handle.write(f"{name}: {describe(result)}\n")
    return found


def test_every_attack_file_is_in_the_table_and_names_its_class_and_source():
    files = {p.stem for p in ATTACKS.glob("*.py") if p.stem != "__init__"}
    assert files == set(CASES) | set(HONEST) | set(GPU_CASES) | {"persist_across_evaluations"}
    for name in [*CASES, *GPU_CASES, "persist_across_evaluations"]:
        header = (ATTACKS / f"{name}.py").read_text().splitlines()[:6]
        assert header[0].startswith("# Attack class:"), name
        assert any(line.startswith("# Described in:") for line in header), name


def check_expected(result, expected) -> None:
    if isinstance(expected, Verdict):
        assert result.verdict == expected, describe(result)
    elif isinstance(expected, set):
        assert result.verdict in expected, describe(result)
    elif expected == NOT_CORRECT:
        assert result.verdict != Verdict.CORRECT, describe(result)
    elif expected in (NO_SPEEDUP, NO_GAIN, NO_TICK_GAIN):
        children_refused = device_access.refusal_for("cuda") is not None  # a child then has no context at all
        bound = {NO_SPEEDUP: 3, NO_GAIN: 1.25, NO_TICK_GAIN: 1.25 if children_refused else 1.10}[expected]
        assert result.verdict != Verdict.CORRECT or (result.speedup is not None and result.speedup < bound), \
            describe(result)
    elif expected == HACK:
        assert result.verdict == Verdict.HACK_DETECTED, describe(result)
    else:
        _, rules = expected
        rules = {rules} if isinstance(rules, str) else rules
        assert result.verdict == Verdict.HACK_DETECTED and result.hack_rule in rules, describe(result)
    if result.verdict != Verdict.CORRECT:
        assert result.speedup is None, describe(result)  # no speed is reported, or rewarded, without a correct result


def describe(result) -> str:
    return f"{result.verdict.value} rule={result.hack_rule} speedup={result.speedup} :: {result.error_message[:300]}"


@pytest.mark.parametrize("name", list(CASES))
def test_attack_is_stopped(results, name):
    check_expected(results[name], CASES[name][2])


@pytest.fixture(scope="module")
def gpu_results(tmp_path_factory):
    with make_evaluator(str(tmp_path_factory.mktemp("gpu-cache")), devices="auto", spare_per_device=0) as ev:
        requests = [EvalRequest(problem_id="attacks/gpu_matmul", reference_source=GPU_MATMUL,
                                candidate_source=(ATTACKS / f"{name}.py").read_text(), correctness_trials=3,
                                timing_trials=50, warmup_trials=5, request_id=name)
                    for name in GPU_CASES]
        requests.append(EvalRequest(problem_id="attacks/gpu_matmul", reference_source=GPU_MATMUL,
                                    candidate_source=(ATTACKS / "honest_matmul.py").read_text(), request_id="honest"))
        return {result.request_id: result for result in ev.evaluate_many(requests)}


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(GPU_CASES))
def test_cuda_attack_is_stopped(gpu_results, name):
    check_expected(gpu_results[name], GPU_CASES[name])


@pytest.mark.gpu
def test_early_start_side_stream_with_cudas_default_queues(tmp_path, monkeypatch):
    """A user who sets CUDA's eight hardware queues back (CUDA_DEVICE_MAX_CONNECTIONS=8) gets the early start back
    too, and the hold's watch still stops it."""
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "8")
    with make_evaluator(str(tmp_path), devices="auto", spare_per_device=0) as ev:
        result = ev.evaluate(EvalRequest(
            problem_id="attacks/gpu_matmul", reference_source=GPU_MATMUL, correctness_trials=3, timing_trials=50,
            warmup_trials=5, candidate_source=(ATTACKS / "gpu_side_stream_early_start.py").read_text(),
            request_id="early-start-eight-queues"))
    check_expected(result, NOT_CORRECT)


@pytest.mark.gpu
def test_honest_cuda_matmul_stays_correct(gpu_results):
    result = gpu_results["honest"]
    assert (result.verdict, result.hack_rule) == (Verdict.CORRECT, None), describe(result)
    assert 0.5 < result.speedup < 2, describe(result)


@pytest.mark.parametrize("name", list(HONEST))
def test_honest_look_alike_stays_correct(results, name):
    result = results[name]
    assert (result.verdict, result.hack_rule) == (Verdict.CORRECT, None), describe(result)


def test_nothing_planted_by_one_candidate_reaches_the_next(evaluator):
    """Files in HOME, TMPDIR, /tmp, /dev/shm, the working folder and the environment: every evaluation starts clean."""
    for attempt in range(3):
        result = evaluator.evaluate(attack_request("persist_across_evaluations", "relu", "torch",
                                                   measure_timing=False, request_id=f"persist-{attempt}"))
        assert result.verdict == Verdict.CORRECT, describe(result)


def test_the_evaluator_still_judges_after_every_attack(evaluator, results):
    honest = evaluator.evaluate(attack_request("honest_clock_and_print", "relu", "torch", request_id="after"))
    assert honest.verdict == Verdict.CORRECT, describe(honest)
    wrong = evaluator.evaluate(attack_request("return_input_view", "relu", "torch", request_id="after-wrong"))
    assert wrong.verdict == Verdict.WRONG_OUTPUT, describe(wrong)


def test_no_forked_child_outlives_its_evaluation(evaluator, results):
    """The bounded fork bomb's 64 sleepers (time.sleep(120), same command line as their runner) must be gone once its
    result is in: only each slot's zygote and its pre-warmed runner may remain."""
    from evaluator.isolation.proctree import descendants

    assert results["fork_bomb"].verdict != Verdict.CORRECT
    # Only this test process's own evaluator: another test module may run its evaluator beside this one (xdist).
    runners = []
    for pid in descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                args = handle.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "evaluator.slot.runner" in args and "bwrap" not in args:
            runners.append(args)
    assert 1 <= len(runners) < 16, len(runners)  # the zygote at least: the scan sees the sandbox's processes


def test_only_the_correctness_trials_keep_predictable_seeds():
    """KernelBench-compatible trial inputs; every other set the judge serves is seeded with its own secret, so a bank
    of answers built from judge.input_seed at import (attacks/precomputed_replay.py) misses."""
    from evaluator.judging import judge
    from evaluator.slot import judge_host

    request = attack_request("honest_matmul", "matmul", "torch")
    assert judge_host.input_seed(request, "trial-1") == judge.input_seed(request.seed, "trial-1")
    for name in ("timing-0", "timing-7", "recheck", "poison", "swap"):
        assert judge_host.input_seed(request, name) != judge.input_seed(request.seed, name)
        assert judge_host.input_seed(request, name) == judge_host.input_seed(request, name)  # stable within the judge


PROCESS_PROBE = '''
import resource
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        raise RuntimeError("NPROC%dNPROC" % resource.getrlimit(resource.RLIMIT_NPROC)[0])
'''


@pytest.mark.skipif(os.getuid() != 0 or get_sandbox().kind != "bwrap", reason="the cap applies to the sandbox user")
def test_an_unbounded_fork_bomb_meets_a_process_cap(evaluator):
    """A real fork bomb cannot be run on a shared machine; the cap that bounds one is read from inside the sandbox:
    the candidate user's processes and threads stop at min(16384, pid_max / 2), below the host's pid_max."""
    request = attack_request("honest_matmul", "relu", "torch", measure_timing=False, request_id="nproc")
    request.candidate_source = PROCESS_PROBE
    result = evaluator.evaluate(request)
    found = re.search(r"NPROC(\d+)NPROC", result.error_message)
    assert found, result.error_message
    cap = int(found.group(1))
    with open("/proc/sys/kernel/pid_max") as handle:
        assert 0 < cap <= min(16384, int(handle.read()) // 2), result.error_message
