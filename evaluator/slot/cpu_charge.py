"""The CPU time a runner's whole process tree has used, read by the judge from the kernel's accounting (never from the
runner): the task cgroup's cpuacct where the sandbox gives one, else every thread's schedstat across the tree."""

from __future__ import annotations

import os
from typing import Callable, Optional

from evaluator.isolation.proctree import children


def cgroup_cpu_ns(cgroup_dir: str) -> Optional[int]:
    """cgroup v1 cpuacct.usage (ns) or v2 cpu.stat usage_usec, of the task's own cgroup; None where unreadable."""
    try:
        with open(os.path.join(cgroup_dir, "cpuacct.usage")) as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        pass
    try:
        with open(os.path.join(cgroup_dir, "cpu.stat")) as handle:
            for line in handle:
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) * 1000
    except (OSError, ValueError):
        pass
    return None


def _threads_ns(pid: int) -> int:
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as handle:
                total += int(handle.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def _reaped_children_ns(pid: int) -> int:
    """cutime + cstime of /proc/<pid>/stat: children that already exited and were reaped (clock ticks)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[13]) + int(fields[14])) * (10**9 // os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0


class CpuCharge:
    """Reads of a task's CPU time: `now()` in ns, monotonic for a live tree. Threads that exit between two reads are
    lost from the tree sum (their time moves to the process's utime, ticks only); the cgroup read loses nothing."""

    def __init__(self, root_pid: int, cgroup_dir: str = "", group_cpu: Optional[Callable[[], Optional[int]]] = None):
        self.root_pid, self.cgroup_dir = root_pid, cgroup_dir
        # group_cpu: the task's own cgroup (evaluator/slot/task_isolation.py), preferred to the sandbox's folder.
        self.group_cpu = group_cpu if group_cpu is not None and group_cpu() is not None else None
        if self.group_cpu is None and cgroup_dir and cgroup_cpu_ns(cgroup_dir) is not None:
            self.group_cpu = lambda: cgroup_cpu_ns(cgroup_dir)
        self.source = "cgroup" if self.group_cpu is not None else "schedstat"

    def now(self) -> int:
        if self.group_cpu is not None:
            value = self.group_cpu()
            if value is not None:
                return value
        pids, index = [self.root_pid], 0
        while index < len(pids) and len(pids) < 4096:  # the tree through /proc/<pid>/task/*/children: no full scan
            pids.extend(children(pids[index]))
            index += 1
        return sum(_threads_ns(pid) for pid in pids) + _reaped_children_ns(self.root_pid)
