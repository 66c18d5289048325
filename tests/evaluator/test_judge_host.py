"""The judge's side of a task's inputs and outputs: it makes every set itself (unscheduled names refused), writes it for
the runner, and checks an output against its own reference output, never against anything the runner says."""

from __future__ import annotations

import os

import pytest
import torch

from evaluator.judging import judge, tensorwire
from evaluator.slot.evidence import admitted_failure, check_answer
from evaluator.slot.outcome import ProtocolBreach, TaskEnded
from evaluator.slot.task_judge import TaskJudge
from evaluator.contract.types import Verdict
from tests.evaluator.pool_support import GOOD, request


def _judge(tmp_path) -> TaskJudge:
    inputs_dir, outputs_dir = tmp_path / "in", tmp_path / "out"
    inputs_dir.mkdir()
    outputs_dir.mkdir()
    return TaskJudge(request(GOOD, request_id="judge"), "cpu", str(inputs_dir), str(outputs_dir))


def test_the_judge_checks_an_output_against_its_own_reference(tmp_path):
    task = _judge(tmp_path)
    values = task.make("trial-0")
    served = tensorwire.read_values(os.path.join(task.inputs_dir, "trial-0.krlt"), 2**30)
    assert torch.equal(served[0], values[0])
    tensorwire.write_values(os.path.join(task.outputs_dir, "trial-0.krlt"), torch.relu(values[0]))
    assert task.compare("trial-0", task.reference_outputs["trial-0"])[0].ok
    nudged = judge.nudged_values(task.make("timing-1"), 12345)  # a timed call's values, made by the judge too
    tensorwire.write_values(os.path.join(task.outputs_dir, "call-3.krlt"), torch.relu(values[0]))
    assert not task.compare("call-3", task.reference_output(nudged))[0].ok  # the base answer for nudged values
    with open(os.path.join(task.outputs_dir, "call-4.krlt"), "wb") as handle:
        handle.write(b"garbage")
    comparison, output = task.compare("call-4", task.reference_output(nudged))
    assert comparison.verdict == Verdict.WRONG_OUTPUT and output is None


def test_the_judge_reading_and_writing_through_its_reused_buffers_keeps_every_value_its_own(tmp_path, monkeypatch):
    """The GPU judge's path, on this CPU: a set the cache would not keep is written straight into its file, and
    outputs read into the reused buffer come out as copies, so the next file read leaves earlier outputs and values as they were."""
    task = _judge(tmp_path)
    task.reuse_buffers = True
    monkeypatch.setattr(task.cache, "keeps", lambda size: False)
    first, second = task.make("trial-0"), task.make("trial-1")
    for name, values in (("trial-0", first), ("trial-1", second)):
        served = tensorwire.read_values(os.path.join(task.inputs_dir, name + ".krlt"), 2**30)
        assert torch.equal(served[0], values[0])
    assert not torch.equal(first[0], second[0])
    for name, values in (("trial-0", first), ("trial-1", second)):
        tensorwire.write_values(os.path.join(task.outputs_dir, name + ".krlt"), torch.relu(values[0]))
    comparison, output = task.compare("trial-0", task.reference_outputs["trial-0"])
    assert comparison.ok
    later, _ = task.compare("trial-1", task.reference_outputs["trial-1"])
    assert later.ok and torch.equal(output, torch.relu(first[0]))  # not overwritten by the second read


def test_sets_outside_the_schedule_are_refused(tmp_path):
    task = _judge(tmp_path)
    for name in ("trial-2", "timing-64", "nudged-0-1", "../x"):  # the request has 2 trials
        with pytest.raises(ValueError):
            task.make(name)


def test_a_runner_can_admit_a_fault_but_never_claim_a_pass_or_our_failure():
    assert admitted_failure({"type": "failed", "verdict": "compile_error", "message": "x"}).verdict == \
        Verdict.COMPILE_ERROR
    for verdict in ("correct", "crashed", "timeout", "nonsense"):
        assert isinstance(admitted_failure({"type": "failed", "verdict": verdict}), ProtocolBreach)
    with pytest.raises(ProtocolBreach):
        check_answer({"type": "result", "result": {"verdict": "correct"}}, "output", "trial-0")
    with pytest.raises(ProtocolBreach):
        check_answer({"type": "output", "name": "trial-1"}, "output", "trial-0")
    with pytest.raises(ProtocolBreach):
        check_answer({"type": "ran", "speedup": 1000.0}, "ran")
    with pytest.raises(ProtocolBreach):  # a field of another answer (the evidence's) on this one
        check_answer({"type": "ran", "own_kernel_time_fraction": 1.0}, "ran")
    assert check_answer({"type": "handed", "projections": ""}, "handed")["projections"] == ""
    with pytest.raises(TaskEnded):
        check_answer({"type": "failed", "verdict": "runtime_error", "message": "boom"}, "ran")


def test_a_reported_kernel_share_is_bounded_by_what_the_judge_reads_in_the_source():
    """own_kernel_time_fraction is the runner's (forgeable) claim: kept within [0, 1] for a source with kernels of its
    own, none for the torch backend, at most 0 for a source in which the judge finds no kernel."""
    from evaluator.slot.evidence import kernel_fraction
    from tests.evaluator.candidates.harness import candidate

    forged = {"type": "evidence", "own_kernel_time_fraction": 7.0}
    cuda = request(candidate("cuda_relu.py"), backend="cuda")
    assert kernel_fraction(forged, cuda) == 1.0
    assert kernel_fraction({"type": "evidence", "own_kernel_time_fraction": 0.25}, cuda) == 0.25
    assert kernel_fraction(forged, request(GOOD, backend="torch")) is None
    assert kernel_fraction(forged, request(GOOD, backend="triton")) == 0.0  # no @triton.jit in it
    assert kernel_fraction({"type": "evidence", "own_kernel_time_fraction": None}, cuda) is None


def test_a_gpu_slot_adds_spare_runners_only_when_tasks_wait_for_one():
    """Spares follow the measured need (a runner's warm-up outlasting the tasks between), bounded by a cap and by the
    device's free memory; a slot never drops below what it has."""
    from evaluator.slot.judge_host import MAX_GPU_SPARES, next_spare_target

    assert next_spare_target(2, 1.1, 0.9) == 3  # waited 1.1 s: one more
    assert next_spare_target(2, 0.001, 0.9) == 2  # a warm runner was there
    assert next_spare_target(2, 1.1, 0.1) == 2  # the device is nearly full: no more contexts on it
    assert next_spare_target(MAX_GPU_SPARES, 5.0, 0.9) == MAX_GPU_SPARES


def test_the_zygote_imports_the_profilers_modules_for_a_gpu_without_initialising_cuda():
    """What torch.profiler's first session imports (dynamo, inductor: 4-6 s of CPU in every fresh runner on an H100
    host) is imported once in the zygote on a GPU slot, and leaves CUDA uninitialised (a zygote that initialised it
    would leave no runner able to use it). Run in a fresh interpreter, as the zygote is."""
    import subprocess
    import sys

    probe = ("import sys, torch\n"
             "from evaluator.slot.runner import import_runner_modules\n"
             "import_runner_modules('cuda:0')\n"
             "print('torch._dynamo' in sys.modules, torch.cuda.is_initialized())\n"
             "from triton.runtime.cache import triton_key\n"
             "print(triton_key.cache_info().currsize)\n")  # Triton's version hash done once, for every runner
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split() == ["True", "False", "1"]
    off = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=True,
                         env={**__import__("os").environ, "KRL_WORKER_PROFILER_IMPORTS": "0"})
    assert off.stdout.split() == ["False", "False", "1"]
