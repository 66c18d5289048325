"""Timing in KernelBench's convention, so speedups can be set beside published fast_p figures: each callable timed
on its own, eager calls with host launch gaps included, one CUDA event pair per call after an L2 flush, mean of trials.

This is the convention papers report. The judge's own protocol (evaluator/judging/timing.py) holds launches behind a spin
kernel and interleaves reference and candidate, measuring device time; the two differ most for launch-bound fusions."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from evaluator.judging.timing import HostClock

CONVENTION = "kernelbench"  # stamped beside the numbers: eager, host gaps in, cuda events, L2 flushed, mean


@dataclass(frozen=True)
class KernelBenchSettings:
    """KernelBench's defaults: 3 warm-up calls, 100 timed trials, L2 flushed before each, the mean reported."""

    trials: int = 100
    warmup: int = 3
    flush_l2: bool = True
    # Upper bound on the wall time spent on one callable (CPU mode, very slow kernels); at least 3 trials are kept.
    budget_s: float = 10.0


def _no_hook(name: str) -> None:
    return None


def time_callables(fns: dict[str, Callable[[], Any]], device: str, settings: KernelBenchSettings = KernelBenchSettings(),
                   before: Callable[[str], None] = _no_hook, flush: Optional[Callable[[], None]] = None,
                   reset_l2: Optional[Callable[[], Any]] = None) -> dict[str, list[float]]:
    """Per callable, the milliseconds of each timed trial, callables one after another (not interleaved).
    `before(name)` runs untimed ahead of every call (input rotation); `flush` overwrites L2 (default: a buffer of
    twice the L2 size); `reset_l2` undoes persisting-L2 windows before each trial. On a CPU device: the
    evaluator's host clock (perf_counter less scheduler waits)."""
    cuda = str(device).startswith("cuda")
    if cuda:
        import torch

        if flush is None and settings.flush_l2:
            buffer = _flush_buffer(torch, device)
            flush = buffer.zero_
        return {name: _time_cuda(torch, fn, name, settings, before, flush if settings.flush_l2 else None, reset_l2)
                for name, fn in fns.items()}
    return {name: _time_cpu(fn, name, settings, before) for name, fn in fns.items()}


def _flush_buffer(torch: Any, device: str) -> Any:
    props = torch.cuda.get_device_properties(device)
    l2_bytes = int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)
    return torch.empty(max(2 * l2_bytes, 64 * 2**20) // 4, dtype=torch.int32, device=device)


def _time_cuda(torch: Any, fn: Callable[[], Any], name: str, settings: KernelBenchSettings,
               before: Callable[[str], None], flush: Optional[Callable[[], None]],
               reset_l2: Optional[Callable[[], Any]]) -> list[float]:
    for _ in range(settings.warmup):
        before(name)
        fn()
    torch.cuda.synchronize()
    samples: list[float] = []
    started = time.perf_counter()
    for trial in range(settings.trials):
        before(name)
        if reset_l2 is not None:
            reset_l2()
        if flush is not None:
            flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(float(start.elapsed_time(end)))
        if trial >= 2 and time.perf_counter() - started > settings.budget_s:
            break
    return samples


def _time_cpu(fn: Callable[[], Any], name: str, settings: KernelBenchSettings,
              before: Callable[[str], None]) -> list[float]:
    for _ in range(settings.warmup):
        before(name)
        fn()
    samples: list[float] = []
    started = time.perf_counter()
    with HostClock() as clock:  # wall time less the time the thread waited for a core (a loaded host's noise)
        for trial in range(settings.trials):
            before(name)
            samples.append(clock.measure_ms(fn))
            if trial >= 2 and time.perf_counter() - started > settings.budget_s:
                break
    return samples


def mean_ms(samples: list[float]) -> Optional[float]:
    values = [v for v in samples if v == v and v >= 0]
    return statistics.fmean(values) if values else None


def speedup(reference_ms: list[float], candidate_ms: list[float]) -> Optional[float]:
    """KernelBench's speedup: mean reference time over mean candidate time (None when either is missing)."""
    reference, candidate = mean_ms(reference_ms), mean_ms(candidate_ms)
    if reference is None or candidate is None or candidate <= 0:
        return None
    value = reference / candidate
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class PairTiming:
    """One evaluation's figures in KernelBench's convention."""

    reference_ms: Optional[float]
    candidate_ms: Optional[float]
    speedup: Optional[float]
    trials: int


def measure_pair(candidate: Callable[[], Any], reference: Callable[[], Any], device: str, trials: int,
                 advance: Callable[[], None], flush: Optional[Callable[[], None]] = None,
                 reset_l2: Optional[Callable[[], Any]] = None, budget_s: float = 10.0) -> PairTiming:
    """Reference first, then candidate, as KernelBench's eval does. `advance` refills the inputs between calls (fresh
    values, untimed), so a memo keyed on content buys nothing here either."""
    settings = KernelBenchSettings(trials=max(3, trials), budget_s=budget_s)
    samples = time_callables({"reference": reference, "candidate": candidate}, device, settings,
                             before=lambda name: advance(), flush=flush, reset_l2=reset_l2)
    return PairTiming(mean_ms(samples["reference"]), mean_ms(samples["candidate"]),
                      speedup(samples["reference"], samples["candidate"]), len(samples["candidate"]))
