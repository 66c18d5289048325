"""While a task holds its GPU for timing, the judge and the timed runner run at a higher CPU priority than the rest
of the pool, so other slots' loading, JIT and input making cannot stretch host-bound timed calls."""

from __future__ import annotations

import os

BOOSTED_NICE = -10  # CFS weight ~9x a nice-0 process: other slots' work yields to the timed pair when cores run out


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


class TimingPriority:
    """`with TimingPriority(runner_pid):` the judge's threads and the runner's at BOOSTED_NICE, restored after (the
    runner's threads made meanwhile inherited the boost, so every thread it has then is put back to 0)."""

    def __init__(self, runner_pid: int):
        self.runner_pid = runner_pid
        self.judge_nice: dict[int, int] = {}

    def __enter__(self) -> "TimingPriority":
        for tid in _threads(os.getpid()):
            try:
                self.judge_nice[tid] = os.getpriority(os.PRIO_PROCESS, tid)
            except OSError:
                pass
        _set_nice(list(self.judge_nice), BOOSTED_NICE)
        if self.runner_pid > 0:
            _set_nice(_threads(self.runner_pid), BOOSTED_NICE)
        return self

    def __exit__(self, *exc) -> None:
        if self.runner_pid > 0:
            _set_nice(_threads(self.runner_pid), 0)
        for tid, nice in self.judge_nice.items():
            _set_nice([tid], nice)
