"""One timed window: this GPU's lock held exclusive, and the timed pair (the judge, its runner) ahead of the rest of the
pool for CPU meanwhile; the wait and the hold booked in the task's phases."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Iterator

from evaluator.contract.types import Verdict
from evaluator.slot.outcome import TaskEnded

# Milliseconds a window had after a wait for the device lets pass before its timed work (0: none; at most 20). On an
# H200 at 8 slots the side a gated round released first read a median 1.47x the second in windows had after a wait,
# 0.99x in windows had at once (session 18, call E); one slot alone and two processes alone showed nothing of it, a busy
# neighbour context 2x (tests/bench/probe_gate_sibling.py): the slot that held the device before starts its next
# round's GPU work (its checks, its draws) at once, and it takes time slices from the start of the next window. A 3 ms
# settle took it to 1.14x, 10 ms to 1.00x; with the runner's draws sent first and the armed drain, 3 ms halved the
# batches' spread at the same rate (call F).
SETTLE_ENV = "KRL_WORKER_TIMING_SETTLE_MS"
SETTLE_DEFAULT_MS = 3.0
# A task's counted rounds (its own, then KernelBench's) held as one exclusive window each (TimingPhase.held_together),
# not a window a round; "0" a window a round. Held together, the rounds read steadier, since no other slot's work comes
# between them: at 8 slots on an H200 with every GPU step shared (session 24, call B) the Triton rounds' spread fell
# from 0.21 to 0.08, honest Triton within ±5% of torch's ReLU rose from 37 to 42 of 48 and identical torch code read
# 30 of 32, at 102 Triton evaluations a minute against 110 (the work between the rounds is held too).
TOGETHER_ENV = "KRL_WORKER_TIMING_HOLD_TOGETHER"


def rounds_held_together() -> bool:
    return os.environ.get(TOGETHER_ENV, "1").strip() != "0"


def settle_seconds() -> float:
    try:
        return min(20.0, max(0.0, float(os.environ.get(SETTLE_ENV, SETTLE_DEFAULT_MS)))) / 1e3
    except ValueError:
        return SETTLE_DEFAULT_MS / 1e3


@contextlib.contextmanager
def exclusive_window(lock: Any, deadline: float, phases: dict[str, Any], runner_pid: int,
                     why: str) -> Iterator[None]:
    """`lock` (this GPU's, isolation/device_lock.py) held exclusive for one timed window, and the timed pair (the judge,
    the runner `runner_pid`) ahead of the rest of the pool for CPU meanwhile. TaskEnded when the device is not had by
    `deadline`. The wait adds to `device_wait`, the hold to `timing_held` and `held_<why>` in `phases`. A window had
    after waiting for another timing (lock.contended) first lets settle_seconds() pass, booked in `held_settle` too."""
    from evaluator.isolation.timing_priority import TimingPriority

    if lock.exclusive_depth:  # inside windows held together (TimingPhase.held_together): booked there
        yield
        return
    waited = lock.acquire(deadline)
    if waited is None:
        raise TaskEnded(Verdict.TIMEOUT, "The evaluation did not get the GPU for timing within its limit.")
    phases["device_wait"] = round(phases.get("device_wait", 0.0) + waited, 6)
    # of which the shared steps already on the device took to drain (what every shared step's length costs a timing)
    phases["device_drain"] = round(phases.get("device_drain", 0.0) + lock.drained_s, 6)
    phases["device_windows"] = phases.get("device_windows", 0) + 1
    # 1: shared holders (another slot's order, a hostile spin) still on the device when the drain's bound passed, so
    # this window ran beside them (isolation/device_lock.SHARED_DRAIN_MAX_S); the bench counts it.
    phases["device_shared_overrun"] = max(phases.get("device_shared_overrun", 0), int(lock.overran))
    since = time.perf_counter()
    try:
        with TimingPriority(runner_pid):
            settle = settle_seconds() if lock.contended else 0.0
            if settle:  # handed over just now: the slot before starts its next GPU work, which settles first
                time.sleep(settle)
                phases["held_settle"] = round(phases.get("held_settle", 0.0) + settle, 6)
            yield
    finally:
        lock.release()
        took = time.perf_counter() - since
        phases["timing_held"] = round(phases.get("timing_held", 0.0) + took, 6)
        # and by window (held_rounds, held_sizing, held_kb_*): which windows the slot's bound is made of
        phases["held_" + why] = round(phases.get("held_" + why, 0.0) + took, 6)
