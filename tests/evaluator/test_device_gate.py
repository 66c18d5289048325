"""The device gates of the judge's timing (evaluator/slot/device_gate.py): the page's writer and keeper on any machine;
through the real slot on a GPU, gated rounds, and sides that synchronise inside a call timed without gates."""

from __future__ import annotations

import mmap
import os
import struct
import time

import pytest

from evaluator.isolation.environment import is_allowed
from evaluator.isolation.timing_priority import SAME_CPU_ENV
from evaluator.slot import device_gate, gated_rounds, kernelbench_phase, round_figures, timing_phase
from evaluator.slot.device_gate import FORCED_STEP, GATE_AT, PAGE_BYTES, SHIFT_AT, GateKeeper, GateWriter


def shared_page() -> tuple[int, mmap.mmap]:
    descriptor = os.memfd_create("gate-test")
    os.ftruncate(descriptor, PAGE_BYTES)
    return descriptor, mmap.mmap(descriptor, PAGE_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)


def count_of(page: mmap.mmap) -> int:
    return struct.unpack("<I", page[GATE_AT:GATE_AT + 4])[0]


def test_the_writer_stores_the_shift_before_opening_the_next_count():
    _, page = shared_page()
    writer = GateWriter(page)
    assert writer.next() == 1
    writer.open(0.25)
    assert count_of(page) == 1 and struct.unpack("<f", page[SHIFT_AT:SHIFT_AT + 4])[0] == 0.25
    assert writer.next() == 2
    writer.open_all()
    assert count_of(page) == 1 + FORCED_STEP  # past anything queued behind 2, 3, ...


def test_the_keeper_opens_a_page_left_shut_past_its_deadline_and_not_one_disarmed_in_time():
    descriptor, page = shared_page()
    keeper = GateKeeper(descriptor)
    try:
        keeper.arm(5.0)
        keeper.disarm()
        time.sleep(0.3)
        assert count_of(page) == 0
        keeper.arm(0.05)
        deadline = time.monotonic() + 10
        while count_of(page) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert count_of(page) == FORCED_STEP
    finally:
        os.close(keeper.orders_w)
        keeper.process.wait(timeout=10)  # the judge's end closed: the keeper ends


def test_the_shift_moves_each_draw_and_keeps_it_in_the_unit_interval():
    import torch

    from evaluator.judging.judge import shifted_factors

    draws = torch.tensor([0.0, 0.3, 0.9, 0.999])
    moved = shifted_factors(draws.clone(), torch.tensor([0.5]))
    assert torch.allclose(moved, torch.tensor([0.5, 0.8, 0.4, 0.499]), atol=1e-6)
    assert bool((moved >= 0).all() and (moved < 1).all())


@pytest.mark.parametrize("name", [SAME_CPU_ENV, gated_rounds.GATE_ENV, round_figures.GPU_ROUNDS_ENV,
                                  round_figures.GPU_EXTRA_ROUNDS_ENV, timing_phase.GPU_BATCH_MS_ENV,
                                  kernelbench_phase.CLOCKS_ENV])
def test_every_timing_setting_reaches_the_judge_process(name):
    """The judge runs in a pool worker whose environment is allow-listed: a setting it reads must be on the list (the
    timed pair on one CPU was read as KRL_TIMING_SAME_CPU, which never reached it, sessions 7-11)."""
    assert is_allowed(name)


def test_a_runner_page_is_mapped_read_only(tmp_path):
    """The runner's view of its gate: a write through it faults, so no candidate can open its own gate."""
    path = str(tmp_path / device_gate.PAGE_NAME)
    device_gate.judge_page(path)
    address = device_gate.runner_page(path)
    assert address
    with open("/proc/self/maps") as maps:
        line = next(line for line in maps if line.startswith(f"{address:x}-"))
    assert line.split()[1].startswith("r--")


# ---- through the real slot on a GPU

SYNCING_RELU = '''
import torch
import torch.nn as nn
class {name}(nn.Module):
    def forward(self, x):
        y = torch.relu(x)
        if float(y.sum().item()) < 0:  # a synchronisation inside every call
            y = -y
        return y
def get_inputs():
    return [torch.randn(64, 4096)]
def get_init_inputs():
    return []
'''
PLAIN_RELU = SYNCING_RELU.replace("        if float(y.sum().item()) < 0:  # a synchronisation inside every call\n"
                                  "            y = -y\n", "")


@pytest.mark.gpu
def test_gated_rounds_and_sides_that_synchronise_through_the_slot(tmp_path):
    import torch

    from evaluator.contract.types import EvalRequest, Verdict
    from tests.evaluator.pool_support import make_evaluator

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    cases = {
        "plain": (PLAIN_RELU.format(name="Model"), PLAIN_RELU.format(name="ModelNew")),
        "candidate_syncs": (PLAIN_RELU.format(name="Model"), SYNCING_RELU.format(name="ModelNew")),
        "reference_syncs": (SYNCING_RELU.format(name="Model"), PLAIN_RELU.format(name="ModelNew")),
    }
    requests = [EvalRequest(reference_source=reference, candidate_source=source, problem_id=f"gate/{name}",
                            request_id=name, backend="torch", timing_trials=7, run_timeout_s=120.0)
                for name, (reference, source) in cases.items()]
    with make_evaluator(str(tmp_path), devices="cuda:0", spare_per_device=0) as ev:
        results = {r.request_id: r for r in ev.evaluate_many(requests)}
    for name, result in results.items():
        assert result.verdict == Verdict.CORRECT, (name, result.error_message)
        assert result.speedup is not None, name
    assert 0.5 < results["plain"].speedup < 2.0, results["plain"].speedup  # the same work on both sides
    # A synchronisation in every call costs that side a host round trip a call, timed without gates (one H100 at
    # 64 x 4096: the candidate that synchronises 0.44, against a reference that does 2.03).
    assert results["candidate_syncs"].speedup < 1.0 < results["reference_syncs"].speedup
    assert results["plain"].phase_times_s.get("timing_gated") == 1
    assert results["candidate_syncs"].phase_times_s.get("timing_gate_off") == gated_rounds.GATE_OFF_BY["candidate"]
    assert results["reference_syncs"].phase_times_s.get("timing_gate_off") == gated_rounds.GATE_OFF_BY["reference"]
