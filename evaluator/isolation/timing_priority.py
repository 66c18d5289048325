"""While a task holds its GPU for timing, the judge and the timed runner run at a higher CPU priority than the rest
of the pool (opt-in: on one CPU together), so other slots' work cannot stretch their host-bound timed calls."""

from __future__ import annotations

import ctypes
import os
from typing import Optional

BOOSTED_NICE = -10  # CFS weight ~9x a nice-0 process: other slots' work yields to the timed pair when cores run out
# "1": the judge's timing thread and every runner thread share one CPU while the device is held. The two sides take
# turns (the judge waits for the runner's answer, the runner for the judge's next order). Apart, a launch-bound call
# costs what its core gives it: the same ReLU batch in fresh processes on an idle 16-core H100 host took 10-18 us a
# call by process, and identical code read 0.86-0.90. Opt-in: tried on an H100 only together with a second sizing
# round, which made a task's hold 5.6 s and misread an honest matmul (docs/figures.md, "Session 7"); not measured
# alone. A runner's work beside the pinned reference is watched (slot/reference_watch.py).
SAME_CPU_ENV = "KRL_WORKER_TIMING_SAME_CPU"


def _threads(pid: int) -> list[int]:
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def _set_nice(tids: list[int], nice: int) -> int:
    """Each thread's nice value set; how many took it (lowering needs CAP_SYS_NICE: without it, nothing changes)."""
    done = 0
    for tid in tids:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
            done += 1
        except OSError:
            pass
    return done


def _pin(tids: list[int], cpus: set[int]) -> dict[int, set[int]]:
    """Each thread moved to `cpus`; the affinity each had before, by thread (those that took it)."""
    before: dict[int, set[int]] = {}
    for tid in tids:
        try:
            saved = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, cpus)
            before[tid] = saved
        except OSError:
            pass
    return before


def current_cpu() -> Optional[int]:
    """The CPU the calling thread runs on now (glibc's sched_getcpu); None where it cannot say."""
    try:
        cpu = ctypes.CDLL(None).sched_getcpu()
    except (OSError, AttributeError):
        return None
    return cpu if cpu >= 0 else None


class TimingPriority:
    """`with TimingPriority(runner_pid):` the judge's threads and the runner's at BOOSTED_NICE, and with SAME_CPU_ENV
    the judge's calling thread and the runner's threads on the judge's current CPU; all restored after (threads the
    runner made meanwhile inherited the boost and the CPU, so every thread it has then is put back: nice 0, its main
    thread's former affinity)."""

    def __init__(self, runner_pid: int):
        self.runner_pid = runner_pid
        self.judge_nice: dict[int, int] = {}
        self.judge_cpus: Optional[set[int]] = None
        self.runner_cpus: dict[int, set[int]] = {}
        self.cpu: Optional[int] = None  # the shared CPU while held; None when the pair is left where it is

    def __enter__(self) -> "TimingPriority":
        for tid in _threads(os.getpid()):
            try:
                self.judge_nice[tid] = os.getpriority(os.PRIO_PROCESS, tid)
            except OSError:
                pass
        _set_nice(list(self.judge_nice), BOOSTED_NICE)
        if self.runner_pid > 0:
            _set_nice(_threads(self.runner_pid), BOOSTED_NICE)
            if os.environ.get(SAME_CPU_ENV, "0").strip() == "1":
                self._share_cpu()
        return self

    def _share_cpu(self) -> None:
        cpu = current_cpu()
        if cpu is None:
            return
        try:
            self.judge_cpus = os.sched_getaffinity(0)
            os.sched_setaffinity(0, {cpu})
        except OSError:
            self.judge_cpus = None
            return
        self.runner_cpus = _pin(_threads(self.runner_pid), {cpu})
        self.cpu = cpu

    def __exit__(self, *exc) -> None:
        if self.runner_pid > 0:
            _set_nice(_threads(self.runner_pid), 0)
            if self.cpu is not None:
                main = self.runner_cpus.get(self.runner_pid)
                for tid in _threads(self.runner_pid):
                    saved = self.runner_cpus.get(tid, main)
                    if saved:
                        _pin([tid], saved)
        if self.judge_cpus is not None:
            try:
                os.sched_setaffinity(0, self.judge_cpus)
            except OSError:
                pass
        for tid, nice in self.judge_nice.items():
            _set_nice([tid], nice)
