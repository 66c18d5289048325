"""One timed window: this GPU's lock held exclusive, and the timed pair (the judge, its runner) ahead of the rest of the
pool for CPU meanwhile; the wait and the hold booked in the task's phases."""

from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator

from evaluator.contract.types import Verdict
from evaluator.slot.outcome import TaskEnded


@contextlib.contextmanager
def exclusive_window(lock: Any, deadline: float, phases: dict[str, Any], runner_pid: int,
                     why: str) -> Iterator[None]:
    """`lock` (this GPU's, isolation/device_lock.py) held exclusive for one timed window, and the timed pair (the judge,
    the runner `runner_pid`) ahead of the rest of the pool for CPU meanwhile. TaskEnded when the device is not had by
    `deadline`. The wait adds to `device_wait`, the hold to `timing_held` and `held_<why>` in `phases`."""
    from evaluator.isolation.timing_priority import TimingPriority

    waited = lock.acquire(deadline)
    if waited is None:
        raise TaskEnded(Verdict.TIMEOUT, "The evaluation did not get the GPU for timing within its limit.")
    phases["device_wait"] = round(phases.get("device_wait", 0.0) + waited, 6)
    # 1: shared holders (another slot's order, a hostile spin) still on the device when the drain's bound passed, so
    # this window ran beside them (isolation/device_lock.SHARED_DRAIN_MAX_S); the bench counts it.
    phases["device_shared_overrun"] = max(phases.get("device_shared_overrun", 0), int(lock.overran))
    since = time.perf_counter()
    try:
        with TimingPriority(runner_pid):
            yield
    finally:
        lock.release()
        took = time.perf_counter() - since
        phases["timing_held"] = round(phases.get("timing_held", 0.0) + took, 6)
        # and by window (held_rounds, held_sizing, held_kb_*): which windows the slot's bound is made of
        phases["held_" + why] = round(phases.get("held_" + why, 0.0) + took, 6)
