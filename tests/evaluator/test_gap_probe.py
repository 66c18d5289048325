"""The judge's gap probe (evaluator/slot/gap_probe.py): how a window's reading decides (CPU), and what the probe sees on
a real GPU, alone and beside another process's spin kernels (marked gpu)."""

from __future__ import annotations

import multiprocessing
import types

import pytest

from evaluator.slot import gap_probe
from evaluator.slot.gap_probe import Gaps
from evaluator.slot.outcome import Interfered, TimingContended
from evaluator.slot.reference_watch import WatchedReference
from tests.bench.probe_time_slices import spinner


def watched() -> WatchedReference:
    """The watch mixin alone, on a CPU-mode phase's attributes (no probe), as TimingPhase sets them up."""
    phase = WatchedReference()
    phase.kind, phase.watch = "cpu", None
    phase.schedule = types.SimpleNamespace(phases={})
    phase.init_watch()
    return phase


def test_a_quiet_window_is_kept_and_its_largest_gap_recorded():
    phase = watched()
    phase.gapped_window(Gaps(total_ns=30_000, largest_ns=30_000, count=1, bounded=0))  # under GAPPED_NS in all
    assert phase.schedule.phases == {"timing_gap_largest_ms": 0.03}
    assert phase.gapped_rounds == 0


def test_gapped_windows_are_timed_again_then_the_task_is_given_up():
    phase = watched()
    gaps = Gaps(total_ns=4_880_000, largest_ns=2_440_000, count=2, bounded=0)  # a spinning process beside an H200 batch
    for round_ in range(1, gap_probe.GAPPED_ROUNDS_MAX + 1):
        with pytest.raises(Interfered):
            phase.gapped_window(gaps)
        assert phase.schedule.phases["timing_gapped_rounds"] == round_
    with pytest.raises(TimingContended, match="Another CUDA context held the GPU"):
        phase.gapped_window(gaps)
    assert phase.schedule.phases["timing_gap_largest_ms"] == 2.44


def test_a_window_whose_probe_stopped_by_itself_is_timed_again_without_the_probe():
    """Something in the window synchronised the whole device, which waited for the probe to its bound: the window's
    clock holds that wait, so it does not count, and the probe cannot run beside this reference."""
    phase = watched()
    phase.gap_probe = object()  # what gapped_window drops
    with pytest.raises(Interfered):
        phase.gapped_window(Gaps(total_ns=0, largest_ns=400, count=0, bounded=1))
    assert phase.gap_probe is None and phase.schedule.phases["timing_gap_probe_off"] == 1
    assert phase.gapped_rounds == 0


def test_the_cpu_mode_watch_has_no_probe():
    phase = watched()
    with phase.reference_watched():
        assert phase.window_probe is None


@pytest.mark.gpu
def test_the_probe_sees_another_processs_kernels_and_nothing_alone():
    import torch

    probe = gap_probe.GapProbe()
    x = torch.randn(2048, 2048, device="cuda")

    def window() -> Gaps:
        probe.start()
        for _ in range(20):
            x @ x
        probe.end()
        torch.cuda.synchronize()
        return probe.read()

    alone = [window() for _ in range(10)]
    assert not any(gaps.gapped() for gaps in alone), alone
    context = multiprocessing.get_context("spawn")
    ready, stop = context.Event(), context.Event()
    # ~0.1 ms spin kernels kept queued on a side stream, as the spin attacks do
    process = context.Process(target=spinner, args=(ready, stop, 200_000), daemon=True)
    process.start()
    try:
        assert ready.wait(60)
        beside = [window() for _ in range(10)]
    finally:
        stop.set()
        process.join(10)
    assert all(gaps.gapped() for gaps in beside), beside
