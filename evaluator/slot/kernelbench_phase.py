"""KernelBench's speedup convention measured in the slot (issue 24): eager calls, each followed by a synchronisation
(host gaps in), L2 flushed before each on a GPU, mean per call. The judge times the reference itself and charges the
candidate by its own clock (GPU) or the task's CPU accounting (CPU) around one order of N such calls; outputs checked."""

from __future__ import annotations

import statistics
import time
from typing import Any, Optional

# What the stamped kernelbench figures are (docs/slot.md, "KernelBench's convention in the slot"): the candidate side
# includes the pipe round trip of one order, divided by its N calls, and an L2 flush the runner does unverified.
CLOCK = "judge_wall_eager"
CPU_CLOCK = "task_cpu_eager"
MIN_CALLS = 3
ROUNDS = 3  # reference and candidate alternate; the mean of each side's per-call times is reported


def measure(phase: Any, result: Any) -> None:
    """EXTRA_TIMINGS hook: stamps speedup_kernelbench and the two runtimes, when the request asks for them."""
    request = phase.task.request
    if not getattr(request, "kernelbench_timing", False):
        return
    cuda = phase.kind == "cuda"
    # GPU: KernelBench's trial count (the request's timing_trials), within what is staged. CPU: the judge's own batch
    # size, so the runner's fixed cost per order stays a few percent of the charged time (1.0x for identical code).
    calls = min(phase.staged, max(MIN_CALLS, int(request.timing_trials))) if cuda else max(MIN_CALLS, phase.calls)
    flush = _flusher(phase) if cuda else None
    reference_ms: list[float] = []
    candidate_ms: list[float] = []
    for index in range(max(1, min(ROUNDS, int(request.timing_trials)))):  # timing_trials bounds the cost here too
        salt = phase.stage(calls)
        picked = sorted(phase.rng.sample(range(calls), min(2, calls)))
        seed = phase.rng.getrandbits(30)
        for side in (("candidate", "reference") if index % 2 else ("reference", "candidate")):
            # Each side is also charged its projection of every output, as in the judge's rounds: work a runner
            # defers from its eager calls must be done by then (a hole otherwise, the flush being unverifiable).
            if side == "reference":
                seconds = reference_eager(phase, calls, salt, flush)
                reference_ms.append((seconds + phase.reference_hand(picked, seed)) / calls * 1e3)
            else:
                seconds, _ = phase.measured({"type": "run", "calls": calls, "salt": salt, "eager": True}, "ran")
                candidate_ms.append((seconds + phase.candidate_hand(calls, picked, seed)) / calls * 1e3)
        phase.check(picked)  # the eager calls' outputs are checked like the judge's own batches
    reference, candidate = statistics.fmean(reference_ms), statistics.fmean(candidate_ms)
    result.reference_runtime_kernelbench_ms = reference
    result.kernel_runtime_kernelbench_ms = candidate
    result.speedup_kernelbench = reference / candidate if candidate > 0 else None


def reference_eager(phase: Any, calls: int, salt: int, flush: Optional[Any]) -> float:
    """Seconds of the reference over `calls` eager calls on this round's sets, as the runner does them: on a GPU each
    call after an L2 flush and followed by a synchronisation, all on the judge's clock; on a CPU this thread's time. The
    sets are made from `salt` inside the timed region, as the runner makes its own."""
    import torch

    model, outputs = phase.task.model, []
    phase.outputs = outputs
    with torch.no_grad():
        if phase.kind == "cuda":
            torch.cuda.synchronize()
            start = time.perf_counter()
            sets = phase.judge_sets = phase.made_sets(salt, calls)
            for index in range(calls):
                if flush is not None:
                    flush.flush()
                outputs.append(model(*sets[index % len(sets)]))
                torch.cuda.synchronize()
            return time.perf_counter() - start
        from evaluator.judging import sol, timing

        timing.keep_freed_memory()
        timing.reserve_touched_memory(4 * calls * sol.tensor_bytes(phase.task.reference_outputs["timing-0"]))
        start = time.thread_time_ns()
        sets = phase.judge_sets = phase.made_sets(salt, calls)
        for index in range(calls):
            outputs.append(model(*sets[index % len(sets)]))
        return (time.thread_time_ns() - start) / 1e9


def _flusher(phase: Any) -> Any:
    """The judge's own L2 flusher (a buffer of twice the L2 on this device), made once per phase."""
    flusher = getattr(phase, "l2_flusher", None)
    if flusher is None:
        from evaluator.judging import timing

        flusher = phase.l2_flusher = timing.L2Flusher(phase.task.device)
    return flusher
