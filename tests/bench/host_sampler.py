"""The host's side of a benchmark pass: how busy its CPUs were, its load, and which processes sat in uninterruptible
sleep (D) and in what kernel function, sampled once a second (is a pass bound by cores, or by waits in the kernel?)."""

from __future__ import annotations

import collections
import os
import statistics
import threading
from typing import Optional


def host_cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of every CPU so far, from /proc/stat: the busy share over a span is the difference of two
    reads."""
    with open("/proc/stat") as handle:
        fields = [int(v) for v in handle.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    return sum(fields) - idle, sum(fields)


def blocked_now() -> collections.Counter:
    """Processes in uninterruptible sleep now, by the kernel function each waits in (/proc/PID/wchan)."""
    found: collections.Counter = collections.Counter()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
            if state != "D":
                continue
            with open(f"/proc/{name}/wchan") as handle:
                found[handle.read().strip() or "?"] += 1
        except (OSError, IndexError):
            continue
    return found


class HostSampler:
    """`with HostSampler() as host: ...; host.figures()`: the CPUs' busy share over the block, the mean load average,
    the mean count of processes in D and the kernel functions they waited in most."""

    def __init__(self, period_s: float = 1.0):
        self.period_s = period_s
        self.blocked: list[int] = []
        self.loads: list[float] = []
        self.waits: collections.Counter = collections.Counter()
        self.ticks_from: Optional[tuple[int, int]] = None
        self.ticks_to: Optional[tuple[int, int]] = None
        self.stopping = threading.Event()
        self.thread: Optional[threading.Thread] = None

    def __enter__(self) -> "HostSampler":
        if not os.path.exists("/proc/stat"):
            return self
        self.ticks_from = host_cpu_ticks()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self) -> None:
        while not self.stopping.wait(self.period_s):
            found = blocked_now()
            self.blocked.append(sum(found.values()))
            self.waits.update(found)
            self.loads.append(os.getloadavg()[0])

    def __exit__(self, *exc) -> None:
        if self.thread is None:
            return
        self.stopping.set()
        self.thread.join(5)
        self.ticks_to = host_cpu_ticks()

    def figures(self) -> dict:
        if self.ticks_from is None or self.ticks_to is None:
            return {}
        busy = self.ticks_to[0] - self.ticks_from[0]
        total = max(1, self.ticks_to[1] - self.ticks_from[1])
        return {"host_cpu_busy_share": round(busy / total, 3),
                "host_load_mean": round(statistics.fmean(self.loads), 1) if self.loads else None,
                "host_blocked_mean": round(statistics.fmean(self.blocked), 1) if self.blocked else None,
                "host_blocked_in": dict(self.waits.most_common(6))}
