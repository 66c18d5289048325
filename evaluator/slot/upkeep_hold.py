"""The slot's own GPU upkeep outside its steps (spares warming, a finished runner's end, the judge's cache release, a
sizing round's queueing) held shared on the device lock, so no timing runs beside it: measurement knobs, off."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Iterator

# Any other context's GPU work inside a timed window costs it a switch of the device's context: one process running a
# tiny kernel every millisecond took a batch of matrix products on an H200 from 6.9 to 8.2 ms, in gaps of ~0.33 ms,
# and seven such processes to 10.5 ms (session 26, call F, tests/bench/probe_time_slices.py). The slot's own upkeep
# is such work, and the device lock holds none of it.
# "1": each task's new spares warm (CUDA's context, a few kernels) before it, with the device held shared. At one slot
# on an H200 it took the honest Triton tasks with a gapped window from 5 of 16 to none, at 44.7 a minute against 71.3;
# at 8 slots 35 of 48 still had one (call F).
SPARES_ENV = "KRL_WORKER_SPARES_WARM_SHARED"
# "beside": the spares warm while their task's own steps before its timing run (its load, trials, checks), the device
# held shared from their fork until they are ready or the timing starts, which waits for what is left (SparesShare):
# the version that might keep the rate, since a task waits only for the part of the warm-up its steps do not cover.
# On an H200 (session 27, call A) it left no Triton task at one slot with a gapped window (9 of 16 by default) at 54.1
# a minute against 66.1, and 33 of 48 at 8 slots (38 by default): not a default either.
SPARES_BESIDE = "beside"
# "1": the rest held shared too: the last task's runner killed and its context gone, the judge's cached blocks freed,
# each sizing round's batches queued (the counted rounds' are inside their exclusive hold). With both at 8 slots, 32
# of 48 honest Triton tasks still had a gapped window (the largest gap 1.3 ms against 2.6), at 67.1 a minute (call G).
UPKEEP_ENV = "KRL_WORKER_UPKEEP_SHARED"
UPKEEP_WAIT_S = 10.0  # the longest a piece of upkeep waits for the device (timings hold it a few ms a window)
GONE_WAIT_S = 1.0  # the longest the judge waits for a killed runner's exit, which ends its CUDA context


def wanted(env: str) -> bool:
    return os.environ.get(env, "0").strip() == "1"


def spares_beside() -> bool:
    return os.environ.get(SPARES_ENV, "0").strip() == SPARES_BESIDE


class SparesShare:
    """The device held shared for spares warming beside their slot's task (SPARES_BESIDE): taken as they are forked,
    let go once they are ready or once the task's timing has waited for them, whichever comes first."""

    def __init__(self, lock: Any):
        self.lock, self.held = lock, False

    def take(self) -> None:
        if self.lock is not None and not self.held:
            self.held = self.lock.acquire_shared(time.monotonic() + UPKEEP_WAIT_S) is not None

    def let_go(self) -> None:
        if self.held:
            self.held = False
            self.lock.release_shared()


@contextlib.contextmanager
def upkeep_shared(lock: Any, env: str = UPKEEP_ENV) -> Iterator[bool]:
    """`lock` (this GPU's, None on a CPU) held shared over the block where `env` is "1"; yields whether it is."""
    held = lock is not None and wanted(env) and lock.acquire_shared(time.monotonic() + UPKEEP_WAIT_S) is not None
    try:
        yield held
    finally:
        if held:
            lock.release_shared()


def wait_exited(host_pid: int, seconds: float = GONE_WAIT_S) -> None:
    """Until the process has exited (gone, or a zombie: its files, the CUDA context's among them, are closed by
    then), at most `seconds`."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        try:
            with open(f"/proc/{host_pid}/stat", "rb") as handle:
                state = handle.read().rsplit(b")", 1)[-1].split()[0]
        except (OSError, IndexError):
            return
        if state in (b"Z", b"X"):
            return
        time.sleep(0.001)
