"""Process identity: a pid plus its start time (from /proc) and host, so a recycled pid is never taken for a run's
job. What a runs row records about its job, and the one check that a recorded process is still that job."""

from __future__ import annotations

import os
import socket
from typing import Any, Optional

PID_START_TOLERANCE_S = 1.5  # /proc/stat btime can jitter by a second between reads

_BOOT_TIME_S: Optional[float] = None


def boot_time_s() -> float:
    global _BOOT_TIME_S
    if _BOOT_TIME_S is None:
        with open("/proc/stat") as handle:
            for line in handle:
                if line.startswith("btime"):
                    _BOOT_TIME_S = float(line.split()[1])
                    break
            else:
                _BOOT_TIME_S = 0.0
    return _BOOT_TIME_S


def proc_stat(pid: int) -> Optional[tuple[str, float]]:
    """(state letter, start time in epoch seconds) of a pid, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            text = handle.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name may contain spaces and parentheses: fields start after the last ')'.
    fields = text[text.rindex(")") + 2:].split()
    state, start_ticks = fields[0], int(fields[19])
    return state, boot_time_s() + start_ticks / os.sysconf("SC_CLK_TCK")


def process_start_time(pid: int) -> Optional[float]:
    """Start time (epoch seconds) of a live process, None when it does not exist."""
    if not os.path.exists("/proc/self/stat"):
        return None
    stat = proc_stat(pid)
    return stat[1] if stat else None


def process_identity(pid: int | None = None) -> dict[str, Any]:
    """{"pid", "pid_start_time", "host"} for a process (default: this one) — what a runs row records."""
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "pid_start_time": process_start_time(pid), "host": socket.gethostname()}


def pid_matches(pid: int | None, start_time: float | None) -> bool:
    """True when `pid` is a live process that started at `start_time` (a recycled pid does not match)."""
    if not pid:
        return False
    if not os.path.exists("/proc/self/stat"):  # no procfs: liveness only
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    stat = proc_stat(pid)
    if stat is None or stat[0] in ("Z", "X"):
        return False
    if start_time is None:
        return True
    return abs(stat[1] - float(start_time)) <= PID_START_TOLERANCE_S


def run_is_local(row: dict[str, Any]) -> bool:
    return not row.get("host") or row["host"] == socket.gethostname()


def run_process_alive(row: dict[str, Any]) -> bool:
    """Whether the run's recorded process is alive on this host (False for other hosts and recycled pids)."""
    return run_is_local(row) and pid_matches(row.get("pid"), row.get("pid_start_time"))


def other_live_process(row: dict[str, Any]) -> bool:
    """A live process of the run other than this one (a foreground run records the process that ran it)."""
    return row.get("pid") != os.getpid() and run_process_alive(row)
