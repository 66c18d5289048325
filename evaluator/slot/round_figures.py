"""How many rounds a timing counts and what they come to: each side's per-call figure from its rounds, and the rounds'
spread, which decides whether CPU mode counts more of them."""

from __future__ import annotations

import os
import statistics
from typing import Optional

# Counted rounds at most (the request's timing_trials bounds them too); each GPU round holds the device exclusive.
ROUNDS = {"cuda": 6, "cpu": 3}
# What a side's counted rounds come to (side_figure): on a GPU the mean of its FASTEST_ROUNDS fastest rounds. What
# disturbs a timed window there only adds time (another slot's GPU work time-slicing into it, a late wake-up), so the
# fastest rounds are the least disturbed: recomputed on the rounds two H200 runs recorded at 8 slots (identical code,
# sessions 18 and 19), the two fastest of the first 6 rounds put 30-38 of 64 Triton and 15-17 of 32 torch tasks within
# ±5%, the median of up to 10 rounds 23-26 and 12-14 (docs/figures.md, "Session 19"). Two rounds, not one: no single
# round, lucky or forged, sets the figure alone. CPU mode keeps the median: its charge is the kernel's CPU accounting
# in 4 ms ticks, which a minimum would read at its lowest tick.
FASTEST_ROUNDS = 2
MAX_SPREAD = 0.25  # (p75 - p25) / median of the candidate's per-call times beyond this: measured again
# At most this many further rounds while unsteady (CPU: as many as `rounds`). GPU none: at 8 slots nearly every task
# took all three it had (session 19: 2.7 a task), the spread being the neighbours' work in the windows, which more
# rounds do not shrink. The two fastest of 6 rounds did about as well as of 10 (38 of 64 Triton tasks within ±5%
# against 41), and each round holds the device exclusive: at 7 + up to 3 rounds the hold was 0.27 s a Triton task and
# 170 a minute, at 6 0.21 s and 196 (one H200, 8 slots).
EXTRA_ROUNDS = {"cuda": 0, "cpu": 3}
# The GPU's counted and extra rounds from the evaluator's environment, for the benchmarks' A/B of the exclusive hold
# (at 8 slots on an H100 its ~0.4 s a task, most of it these rounds, covered ~67% of the GPU's time): unset, the above.
GPU_ROUNDS_ENV, GPU_EXTRA_ROUNDS_ENV = "KRL_WORKER_TIMING_ROUNDS", "KRL_WORKER_TIMING_EXTRA_ROUNDS"


def round_limits(kind: str) -> tuple[int, int]:
    """(counted rounds at most, extra rounds at most) for this kind of device: ROUNDS and EXTRA_ROUNDS, on a GPU
    overridden by GPU_ROUNDS_ENV and GPU_EXTRA_ROUNDS_ENV where set to a whole number (1+ and 0+)."""
    most, extra = ROUNDS[kind], EXTRA_ROUNDS[kind]
    if kind == "cuda":
        most = _whole(os.environ.get(GPU_ROUNDS_ENV), most, at_least=1)
        extra = _whole(os.environ.get(GPU_EXTRA_ROUNDS_ENV), extra, at_least=0)
    return most, extra


def _whole(text: Optional[str], default: int, at_least: int) -> int:
    try:
        return max(at_least, int(text)) if text else default
    except ValueError:
        return default


def side_figure(per_call_ms: list[float], kind: str) -> float:
    """One side's per-call milliseconds from its counted rounds: on a GPU the mean of its FASTEST_ROUNDS fastest, on a
    CPU the median."""
    if kind != "cuda":
        return statistics.median(per_call_ms)
    fastest = sorted(per_call_ms)[:FASTEST_ROUNDS]
    return sum(fastest) / len(fastest)


def spread(values: list[float]) -> float:
    """The interquartile spread over the median ((p75 - p25) / median); 0 for fewer than 4 values."""
    if len(values) < 4:
        return 0.0
    ordered = sorted(values)
    q1, q3 = ordered[len(ordered) // 4], ordered[(3 * len(ordered)) // 4]
    median = statistics.median(ordered)
    return (q3 - q1) / median if median > 0 else 0.0
