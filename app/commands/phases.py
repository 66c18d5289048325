"""Where an evaluation's time went, in words a user knows: the evaluator's internal phase names (queue,
judge_ready, kernel_checks, …) are summed into a few plain stages, so `krl check` never prints them."""

from __future__ import annotations

from typing import Mapping

# Internal phase -> the stage a user reads. Time waiting for a worker and the worker's own start-up are one stage:
# to a user both are "the evaluator getting ready", whatever the evaluator calls them this release.
STAGES = {
    "queue": "evaluator start-up", "judge_ready": "evaluator start-up", "overhead": "evaluator start-up",
    "task_setup": "evaluator start-up", "spares_warm": "evaluator start-up",
    "device_wait": "waiting for the GPU",
    "compile": "build", "build_install": "build",
    "load": "loading", "correctness": "checking", "kernel_checks": "checking", "recheck": "checking",
    "timing": "timing",
}
ORDER = ("evaluator start-up", "waiting for the GPU", "build", "loading", "checking", "timing", "other")
# Counts, ratios, copies, the timing's per-call yardsticks and its split (parts of "timing"): not durations of a stage.
NOT_TIMES = {"timing_retries", "timing_extra_rounds", "timing_spread", "round_trip", "order_cpu", "seconds", "timing_rounds",
             "timing_hooks", "timing_held", "timing_setup", "timing_kept", "timing_interfered_rounds",
             "device_shared_overrun", "timing_counted_calls", "timing_gated", "timing_gate_off", "timing_gate_blocked",
             "runner_cpu_weight",  # recorded by sessions 21-22's judges
             "timing_freeze", "timing_unfrozen_windows", "timing_gapped_rounds", "timing_gap_largest_ms",
             "timing_gap_probe_off", "timing_harness_share", "timing_speedup_capped"}
# KernelBench's convention's figures; CPU seconds (judge, runner); timing_held by window; correctness's split; the
# judge's allocator counts and memory (slot/device_memory.allocator_phases)
NOT_TIMES_PREFIX = ("kernelbench_", "cpu_", "held_", "trials_", "judge_cuda_", "judge_reserved_")
WHOLE = ("end_to_end", "total")  # the whole wall time, in the order trusted


def plain_stages(phase_times_s: Mapping[str, float]) -> tuple[float, dict[str, float]]:
    """(whole seconds, {stage: seconds}) with unknown phases summed under 'other'; stages under 5 ms left out."""
    stages: dict[str, float] = {}
    for name, seconds in phase_times_s.items():
        if name in NOT_TIMES or name.startswith(NOT_TIMES_PREFIX) or name in WHOLE or \
                not isinstance(seconds, (int, float)):
            continue
        stage = STAGES.get(name, "other")
        stages[stage] = stages.get(stage, 0.0) + float(seconds)
    whole = next((float(phase_times_s[k]) for k in WHOLE if isinstance(phase_times_s.get(k), (int, float))),
                 sum(stages.values()))
    return whole, {stage: stages[stage] for stage in ORDER if stages.get(stage, 0.0) >= 0.005}


def plain_phase_line(phase_times_s: Mapping[str, float]) -> str:
    """'took 14.2 s: evaluator start-up 10.3 s · build 1.2 s · checking 2.0 s', or '' when nothing was timed."""
    whole, stages = plain_stages(phase_times_s)
    if not stages and not whole:
        return ""
    parts = " · ".join(f"{stage} {seconds:.1f} s" for stage, seconds in stages.items())
    return f"took {whole:.1f} s" + (f": {parts}" if parts else "")
