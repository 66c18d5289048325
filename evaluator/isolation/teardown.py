"""The trusted side's end of a task: its cgroup killed as a whole (or, without one, its process tree), the cgroup
removed, and any host folder it could write wiped as root, mode-0000 folders included. Bounded: it never hangs."""

from __future__ import annotations

import os
import shutil
import stat
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

from evaluator.isolation.cgroups import TaskCgroup
from evaluator.isolation.proctree import kill_tree

TEARDOWN_WAIT_S = 5.0
WIPE_BUDGET_S = 10.0


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
        report.wipe_failures += wipe_folder(folder, deadline=started + WIPE_BUDGET_S)
    report.seconds = time.monotonic() - started
    return report


def remove_path(path: str) -> None:
    """A file, link or folder (with what is inside) removed as the caller, errors ignored; links are never followed.
    The quick, same-owner removal between tasks; wipe_folder is the trusted side's thorough one."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


def wipe_folder(folder: str, deadline: Optional[float] = None) -> list[str]:
    """Empty `folder` (kept itself) as the caller, normally root: folders are made searchable and writable before they
    are entered (a mode-0000 folder defeats a wipe by its owner only where the wipe does not chmod it first), links
    are removed, never followed, and other mounts under it are left alone. Returns what could not be removed."""
    deadline = time.monotonic() + WIPE_BUDGET_S if deadline is None else deadline
    failed: list[str] = []
    try:
        device = os.lstat(folder).st_dev
    except OSError:
        return failed
    _wipe_inside(folder, device, deadline, failed)
    return failed


def _wipe_inside(folder: str, device: int, deadline: float, failed: list[str]) -> None:
    try:
        os.chmod(folder, 0o700)
        names = os.listdir(folder)
    except OSError:
        failed.append(folder)
        return
    for name in names:
        path = os.path.join(folder, name)
        if time.monotonic() > deadline:
            failed.append(path)
            continue
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        except OSError:
            failed.append(path)
            continue
        if stat.S_ISDIR(info.st_mode):
            if info.st_dev != device:  # another mount (a bind): not ours to empty
                failed.append(path)
                continue
            _wipe_inside(path, device, deadline, failed)
            try:
                os.rmdir(path)
            except OSError:
                failed.append(path)
        else:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError:
                failed.append(path)
