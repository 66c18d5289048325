"""Process trees of evaluation workers, read from /proc: every descendant, their resident memory, and a kill that
leaves none behind. Workers make themselves child subreapers, so a candidate's setsid'd or double-forked processes
stay in the worker's tree (instead of moving to init) where these functions find them."""

from __future__ import annotations

import os
import signal
import time

PR_SET_CHILD_SUBREAPER = 36
_PAGE = os.sysconf("SC_PAGE_SIZE")


def become_subreaper() -> bool:
    """Orphaned descendants of this process are re-parented to it rather than to init (Linux ≥ 3.4)."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except Exception:  # noqa: BLE001 - not Linux, or no prctl: killpg still covers the common case
        return False


def process_table() -> dict[int, tuple[int, int]]:
    """{pid: (parent pid, resident bytes)} for every process visible in /proc (one pass)."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                # The command name may hold spaces and parentheses: fields are counted after its last ')'.
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        table[int(entry)] = (int(fields[1]), int(fields[21]) * _PAGE)
    return table


def descendants(pid: int, table: dict[int, tuple[int, int]] | None = None) -> list[int]:
    """Every process below `pid` (children, grandchildren …), parents before children."""
    table = process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    found, frontier = [], [pid]
    while frontier:
        next_frontier = []
        for parent in frontier:
            for child in children.get(parent, ()):
                found.append(child)
                next_frontier.append(child)
        frontier = next_frontier
    return found


def has_children(pid: int | None = None) -> bool:
    """Whether the process has any living or unreaped child: a few small reads of /proc/PID/task/*/children
    instead of a pass over every process (falls back to that pass where the kernel lacks those files)."""
    pid = os.getpid() if pid is None else pid
    try:
        if not os.path.exists(f"/proc/{pid}/task/{pid}/children"):  # a kernel built without CONFIG_PROC_CHILDREN
            return bool(descendants(pid))
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return bool(descendants(pid))
    return any(_read(f"/proc/{pid}/task/{tid}/children").strip() for tid in threads)


def children(pid: int) -> list[int]:
    """The direct children of `pid`, from /proc/PID/task/*/children (no pass over every process); falls back to that
    pass where the kernel lacks those files."""
    try:
        if not os.path.exists(f"/proc/{pid}/task/{pid}/children"):
            table = process_table()
            return [child for child, (parent, _) in table.items() if parent == pid]
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    return [int(p) for tid in threads for p in _read(f"/proc/{pid}/task/{tid}/children").split()]


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:  # a thread that ended meanwhile
        return b""


def tree_resident_bytes(pid: int, table: dict[int, tuple[int, int]]) -> int:
    """Resident memory of `pid` and all its descendants."""
    return sum(table.get(p, (0, 0))[1] for p in [pid, *descendants(pid, table)])


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(pid: int, include_root: bool = True) -> list[int]:
    """SIGKILL `pid`'s whole tree (and its process group). Everything is stopped first and the tree re-read until
    it stops growing, so a process forking while we walk cannot slip out. Returns the descendants killed."""
    if include_root:
        _signal(pid, signal.SIGSTOP)
    stopped: list[int] = []
    for _ in range(20):
        fresh = [p for p in descendants(pid) if p not in stopped]
        if not fresh:
            break
        for child in fresh:
            _signal(child, signal.SIGSTOP)
        stopped.extend(fresh)
    for child in stopped:
        _signal(child, signal.SIGKILL)
    if include_root:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        _signal(pid, signal.SIGKILL)
    return stopped


def reap_children(timeout_s: float = 1.0) -> None:
    """Collect this process's dead children (zombies) for up to `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return  # no children left
        if pid == 0:
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)


def tree_cpu_time_ns(pid: int) -> int:
    """CPU time of `pid` and its living descendants, from /proc/<pid>/schedstat (its first field: nanoseconds on a
    CPU). The fallback where no task cgroup exists: the time of processes that have already exited is missing."""
    total = 0
    for member in [pid, *descendants(pid)]:
        fields = _read(f"/proc/{member}/schedstat").split()
        if fields and fields[0].isdigit():
            total += int(fields[0])
    return total
