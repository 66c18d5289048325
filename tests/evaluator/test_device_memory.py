"""A candidate's CUDA out-of-memory error against the judge's own readings: nvidia-smi's listing read per process, and
the rule that makes it the evaluator's failure only when others filled the device. The readings themselves (the
driver's free memory, nvidia-smi) exist only on a GPU machine; the rule is fed numbers of the shapes they return."""

from __future__ import annotations

import dataclasses

import pytest

from evaluator.slot import device_memory

LISTING = "4242, 1200\n4243, 300\n999, 70000\n"


def test_the_runner_tree_is_charged_its_own_processes_only():
    assert device_memory.parse_compute_apps(LISTING, {4242, 4243}) == 1500 * 2**20
    assert device_memory.parse_compute_apps(LISTING, {7}) == 0
    assert device_memory.parse_compute_apps("4242, [N/A]\n", {4242}) is None  # unreadable: the error stands


@pytest.mark.parametrize("message", ["ValueError: shapes do not match", ""])
def test_errors_other_than_out_of_memory_stand(message):
    assert not device_memory.is_out_of_memory(message)
    assert not device_memory.starved_by_others(message, 4242)


def test_torchs_out_of_memory_message_is_recognised():
    assert device_memory.is_out_of_memory("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB.")


GIB = 2**30


@pytest.mark.parametrize("free, held, others", [
    (1 * GIB, 2 * GIB, True),  # full device, the runner modest: the neighbours filled it
    (1 * GIB, 75 * GIB, False),  # the runner holds nearly all of it: its own appetite, no retry
    (20 * GIB, 2 * GIB, True),  # freed since, but others still hold most of it: retried alone, which decides
    (70 * GIB, 2 * GIB, False),  # others hold less than a fair share: they could not have made the difference
    (1 * GIB, None, True),  # nvidia-smi could not say: others may hold it all, the retry alone decides
])
def test_the_rule_retries_alone_when_others_hold_a_fair_share(free, held, others):
    assert device_memory.others_filled_it(free, 80 * GIB, held) is others


def test_without_a_gpu_reading_the_candidates_error_stands():
    # On this machine torch has no CUDA: mem_get_info fails, so the judge cannot say the device was full.
    assert not device_memory.starved_by_others("torch.OutOfMemoryError: CUDA out of memory.", 4242)


def test_a_task_retried_alone_waits_for_an_empty_device_and_keeps_it():
    from evaluator.local.pool import may_start

    assert may_start(False, [False, False])  # ordinary tasks share the device
    assert not may_start(True, [False])  # the alone one waits for the device to empty (holding the queue back)
    assert may_start(True, [])
    assert not may_start(False, [True])  # nothing joins it


def test_the_judges_own_out_of_memory_asks_for_a_retry_alone():
    from evaluator.slot.judge_host import judge_failure_reply

    try:
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    except RuntimeError as exc:
        reply = judge_failure_reply(7, exc)
    assert reply["type"] == "infra" and reply["device_full"] and reply["task"] == 7
    try:
        raise KeyError("a bug")
    except KeyError as exc:
        reply = judge_failure_reply(7, exc)
    assert reply["type"] == "error" and "KeyError" in reply["traceback"]


def test_a_judge_out_of_gpu_memory_is_retried_once_alone_through_a_real_pool(tmp_path):
    """The judge's own out-of-memory (its reference's inputs, here a reference that raises it as a GPU judge beside
    full neighbours would) goes back to the pool as a device-full failure: retried once with the device to itself,
    then reported as the evaluator's failure, never as the candidate's."""
    from evaluator.contract.types import Verdict
    from tests.evaluator.pool_support import GOOD, REFERENCE, make_evaluator, request

    starved = REFERENCE.replace("def get_inputs():", "def get_inputs():\n"
                                "    raise RuntimeError('CUDA out of memory. Tried to allocate 2.00 GiB')\n", 1)
    assert starved != REFERENCE
    ev = make_evaluator(str(tmp_path / "cache"))
    try:
        result = ev.evaluate(dataclasses.replace(request(GOOD), reference_source=starved, problem_id="test/starved"))
        stats = ev.stats()["stats"]
        assert ev.evaluate(request(GOOD)).verdict == Verdict.CORRECT  # the device freed after it
    finally:
        ev.close()
    assert result.verdict == Verdict.CRASHED and "infrastructure failure" in result.error_message
    assert "ran out of GPU memory" in result.error_message
    assert result.attempts == 2 and stats["retried_alone"] == 1


def test_an_allocation_larger_than_the_device_is_the_candidates_at_once():
    """A candidate that asks for more than the device holds cannot make the GPU drain for a retry alone."""
    message = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 TiB. GPU 0 has a total capacity"
    assert device_memory.requested_bytes(message) == int(1.5 * 2**40)
    assert not device_memory.others_filled_it(1 * GIB, 80 * GIB, 2 * GIB, device_memory.requested_bytes(message))
    assert device_memory.others_filled_it(1 * GIB, 80 * GIB, 2 * GIB, 4 * GIB)  # it would have fitted without them
    assert device_memory.requested_bytes("CUDA error: out of memory") is None


def test_a_tasks_judge_side_allocations_are_recorded_from_the_allocators_own_counters(monkeypatch):
    """Where several GPUs' slots waited in the driver (its free, alloc and map calls), the judge's share of those calls
    per task: segments made and freed by its caching allocator, and its peak reserve. Nothing without CUDA."""
    import torch

    assert device_memory.allocator_counts() == {} and device_memory.allocator_phases({}, {}) == {}
    stats = {"segment.all.allocated": 10, "segment.all.freed": 4, "reserved_bytes.all.peak": 300 << 20}
    resets = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda *a: dict(stats))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a: resets.append(1))
    before = device_memory.allocator_counts()
    stats.update({"segment.all.allocated": 16, "segment.all.freed": 13, "reserved_bytes.all.peak": 768 << 20})
    phases = device_memory.allocator_phases(before, device_memory.allocator_counts())
    assert phases == {"judge_cuda_mallocs": 6, "judge_cuda_frees": 9, "judge_reserved_peak_mib": 768.0}
    assert len(resets) == 2  # each reading starts the next peak
    device_memory.allocator_counts(reset_peak=False)  # the timing's own count (judge_cuda_mallocs_timing)
    assert len(resets) == 2
