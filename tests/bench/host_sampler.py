"""The host's side of a benchmark pass: how busy its CPUs were, its load, and which processes sat in uninterruptible
sleep (D), where in the kernel and in which call, once a second (bound by cores, or by waits in the kernel?)."""

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


# x86-64 system call numbers worth naming in /proc/PID/syscall; others are shown as numbers.
SYSCALLS = {0: "read", 1: "write", 2: "open", 3: "close", 9: "mmap", 10: "mprotect", 11: "munmap", 16: "ioctl",
            56: "clone", 57: "fork", 59: "execve", 60: "exit", 61: "wait4", 202: "futex", 231: "exit_group",
            257: "openat", 435: "clone3"}


def blocked_now() -> tuple[collections.Counter, collections.Counter]:
    """Processes in uninterruptible sleep now: by the kernel function each waits in (/proc/PID/wchan), and by who
    (runner, judge host, other) and which call (an ioctl's type and number: the NVIDIA driver's are type 0x46, F)."""
    where: collections.Counter = collections.Counter()
    who: collections.Counter = collections.Counter()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
            if state != "D":
                continue
            with open(f"/proc/{name}/wchan") as handle:
                where[handle.read().strip() or "?"] += 1
            who[f"{_role(name)}:{_call(name)}"] += 1
        except (OSError, IndexError):
            continue
    return where, who


def _role(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read().split(b"\0")
    except OSError:
        return "?"
    text = b" ".join(argv).decode(errors="replace")
    for marker, role in (("evaluator.slot.runner", "runner"), ("evaluator.slot.entry", "judge"), ("ray", "ray")):
        if marker in text:
            return role
    return os.path.basename(argv[0].decode(errors="replace")) or "?"


def _call(pid: str) -> str:
    """The system call a blocked process is in, from /proc/PID/syscall; for an ioctl its request's type and number."""
    try:
        with open(f"/proc/{pid}/syscall") as handle:
            fields = handle.read().split()
    except OSError:
        return "?"
    if not fields or not fields[0].lstrip("-").isdigit():
        return fields[0] if fields else "?"
    number = int(fields[0])
    if number == 16 and len(fields) > 2:
        request = int(fields[2], 16)
        return f"ioctl {(request >> 8) & 0xff:#04x}/{request & 0xff:#04x}"
    return SYSCALLS.get(number, str(number))


class HostSampler:
    """`with HostSampler() as host: ...; host.figures()`: the CPUs' busy share over the block, the mean load average,
    the mean count of processes in D and the kernel functions they waited in most."""

    def __init__(self, period_s: float = 1.0):
        self.period_s = period_s
        self.blocked: list[int] = []
        self.loads: list[float] = []
        self.waits: collections.Counter = collections.Counter()
        self.waiters: collections.Counter = collections.Counter()
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
            found, who = blocked_now()
            self.blocked.append(sum(found.values()))
            self.waits.update(found)
            self.waiters.update(who)
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
                "host_blocked_in": dict(self.waits.most_common(6)),
                "host_blocked_by": dict(self.waiters.most_common(10))}
