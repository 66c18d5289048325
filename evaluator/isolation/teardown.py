"""The end of a task: its cgroup killed as a whole (or, without one, its process tree), the cgroup removed, its host
folders wiped; and `empty_folder`, the one walker both sides use to empty a folder a candidate may have booby-trapped."""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, Sequence

from evaluator.isolation.cgroups import TaskCgroup
from evaluator.isolation.proctree import kill_tree

TEARDOWN_WAIT_S = 5.0
WIPE_BUDGET_S = 10.0
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class TeardownReport:
    """What a teardown did; `clean` is False when something may have survived it (reported, never waited on)."""

    killed: int = 0                 # processes found in the group (or the tree) and killed
    emptied: bool = True            # the group (or the tree) holds no process any more
    cgroup_removed: bool = True
    wipe_failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return self.emptied and self.cgroup_removed and not self.wipe_failures


def teardown_task(cgroup: Optional[TaskCgroup], root_pid: int = 0, wipe: Sequence[str] = (),
                  wait_s: float = TEARDOWN_WAIT_S) -> TeardownReport:
    """Kill everything of one task and remove what it could leave. With a cgroup, the group decides what is the task's
    (a process that left the runner's tree is still in it); without one, the tree below root_pid is all we can find."""
    started = time.monotonic()
    report = TeardownReport()
    if cgroup is not None and not cgroup.removed:
        report.killed = len(cgroup.pids())
        report.emptied = cgroup.kill(wait_s)
        report.cgroup_removed = cgroup.remove()
    elif root_pid > 0 and os.path.exists(f"/proc/{root_pid}"):
        report.killed = len(kill_tree(root_pid)) + 1
    for folder in wipe:
        report.wipe_failures += empty_folder(folder, deadline=started + WIPE_BUDGET_S, one_device=True)
    report.seconds = time.monotonic() - started
    return report


def empty_folder(folder: str, keep: Iterable[str] = (), deadline: Optional[float] = None,
                 one_device: bool = False) -> list[str]:
    """Remove everything inside `folder` (kept itself); return what could not be removed. The one walker for hostile
    folders: every folder is opened relative to its parent without following a link (a link is removed, never
    followed, even if swapped in midway) and given u+rwx first, so a mode-0000 or read-only folder of the caller's
    user is no obstacle. `keep`: paths left untouched (folders on the way to one are emptied, not removed);
    `one_device`: folders on another mount are left alone and reported; past `deadline` (monotonic) the rest is
    reported, not removed."""
    keep = {os.path.normpath(path) for path in keep if path}
    on_the_way = _ancestors(keep)
    try:
        top, names = _open_folder(folder, None)
    except FileNotFoundError:
        return []
    except OSError:
        return [folder]
    device = os.fstat(top).st_dev
    failed: list[str] = []
    # A stack, not recursion: a hostile tree may be deeper than Python's recursion limit (one open folder per level).
    stack = [(top, os.path.normpath(folder), iter(names), False)]
    while stack:
        fd, path, names, remove = stack[-1]
        name = next(names, None)
        if name is None:
            os.close(fd)
            stack.pop()
            if remove:
                _remove(os.rmdir, os.path.basename(path), stack[-1][0], path, failed)
            continue
        child = os.path.join(path, name)
        if child in keep:
            continue
        if deadline is not None and time.monotonic() > deadline:
            failed.append(child)
            continue
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        except OSError:
            failed.append(child)
            continue
        if not stat.S_ISDIR(info.st_mode):
            if child not in on_the_way:  # a link on the way to a kept path stays, as the path does
                _remove(os.unlink, name, fd, child, failed)
        elif one_device and info.st_dev != device:  # another mount (a bind): not ours to empty
            failed.append(child)
        else:
            try:
                child_fd, child_names = _open_folder(name, fd)
            except FileNotFoundError:
                continue
            except OSError:
                failed.append(child)
                continue
            stack.append((child_fd, child, iter(child_names), child not in on_the_way))
    return failed


def _open_folder(name: str, dir_fd: Optional[int]) -> tuple[int, list[str]]:
    """A folder opened without following a link, with u+rwx where it lacked them, and its names."""
    try:
        fd = os.open(name, _FOLDER_FLAGS, dir_fd=dir_fd)
    except PermissionError:  # no read or search right: chmod through a handle that cannot be a link, then reopen
        handle = os.open(name, _FOLDER_FLAGS | os.O_PATH, dir_fd=dir_fd)
        try:
            os.chmod(f"/proc/self/fd/{handle}", stat.S_IMODE(os.fstat(handle).st_mode) | 0o700)
            fd = os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        finally:
            os.close(handle)
    try:
        mode = os.fstat(fd).st_mode
        if mode & 0o700 != 0o700:
            try:
                os.fchmod(fd, stat.S_IMODE(mode) | 0o700)  # no write right: nothing inside could be removed
            except OSError:
                pass  # not ours (a shared /tmp): what fails below is reported
        return fd, os.listdir(fd)
    except OSError:
        os.close(fd)
        raise


def _remove(remove: Callable[..., None], name: str, dir_fd: int, path: str, failed: list[str]) -> None:
    try:
        remove(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError:
        failed.append(path)


def _ancestors(paths: Iterable[str]) -> set[str]:
    found = set()
    for path in paths:
        while (parent := os.path.dirname(path)) not in (path, ""):
            found.add(parent)
            path = parent
    return found
