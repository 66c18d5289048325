"""Every task in a sandbox of its own: the runner, forked from the shared zygote, makes fresh user, mount and IPC
namespaces with size-capped tmpfs over /tmp, /dev/shm, HOME and its outputs, then loads the syscall filters; the
judge puts it in a cgroup of its own and tears that down. The slot calls begin_task/end_task, the runner
enter_runner_sandbox."""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from evaluator.isolation import cgroups
from evaluator.isolation.device_access import Refusal
from evaluator.isolation.teardown import TeardownReport, teardown_task
from evaluator.isolation.sandbox import TASK_ISOLATION_ENV, runner_sandbox_why_not

RUNNER_SANDBOX_ENV = "KRL_WORKER_TASK_SANDBOX"   # JSON settings for the runner; absent: per-task sandboxes are off
CGROUP_PREFIX = "judge"
DEFAULT_TMPFS_BYTES = 2 * 2**30
# The kernel's memory limit sits above the judge's own watch, so the judge's clearer message usually comes first; the
# kernel's is the backstop for what a poll misses (a burst between two looks).
KERNEL_LIMIT_HEADROOM = 1.25

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x08000000, 0x10000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x1000, 0x4000, 0x40000
PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 4, 24, 47, 4
_CAP_VERSION_3 = 0x20080522


# ---------------------------------------------------------------- the zygote's start (judge side)

def zygote_environment(sandbox_kind: str, limits: dict, home: str, outputs_dir: str) -> dict[str, str]:
    """Variables for the zygote: the runners' per-task sandbox settings, or nothing where it cannot be had (then the
    sandbox loads the filter for the whole zygote, as before). Pass filters_in_runner=bool(result) to the spec."""
    if runner_sandbox_why_not(sandbox_kind):
        return {}
    if os.geteuid() == 0:  # groups a killed judge left behind (its processes included)
        cgroups.sweep_stale(CGROUP_PREFIX, os.getpid())
    size = int(limits.get("resident_bytes") or DEFAULT_TMPFS_BYTES)
    return {RUNNER_SANDBOX_ENV: json.dumps({"tmpfs_bytes": size, "home": home, "outputs": outputs_dir})}


# ---------------------------------------------------------------- the runner's own sandbox (trusted code, candidate si

def prepare_zygote() -> None:
    """In the zygote, before its forks: the syscall filter compiled once (libseccomp: ~0.1 s per call on a loaded
    2-core machine), so each runner inherits it instead of compiling its own."""
    if os.environ.get(RUNNER_SANDBOX_ENV):
        from evaluator.isolation import pid_filter  # noqa: F401 - imported here once, not after every fork
        from evaluator.isolation.syscall_filter import filter_bpf

        filter_bpf()


def enter_runner_sandbox() -> str:
    """Called first thing in a freshly forked runner, before any candidate code: 'off' (not asked for), 'on', or why
    the namespaces failed (the filters are loaded anyway; a filter that fails to load raises: never run unfiltered)."""
    config = os.environ.get(RUNNER_SANDBOX_ENV)
    if not config:
        return "off"
    settings = json.loads(config)
    _libc().prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # forked from a non-dumpable zygote: /proc/self/uid_map is root's
    # A session of its own, so a group of its own too: kill(0) and setpriority(PRIO_PGRP, 0) reach this runner's group
    # only, not the zygote's; and an autogroup of its own, whose nice value (/proc/self/autogroup, a file no syscall
    # filter sees) weighed the zygote's whole session, every later runner of the slot included (red team, session 27).
    os.setsid()
    state = "on"
    try:
        _own_namespaces(settings)
    except OSError as exc:
        state = f"own namespaces failed: {exc}"
        print(f"krl runner: per-task sandbox incomplete ({state}); candidate writes reach the shared sandbox",
              file=sys.stderr, flush=True)
    _drop_capabilities()
    _load_filters()
    return state


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def _own_namespaces(settings: dict[str, Any]) -> None:
    libc = _libc()
    uid, gid = os.getuid(), os.getgid()
    # A network namespace of its own too (its loopback down, nothing else in it), gone with its last process: the
    # slot's shared one kept TCP sockets in TIME_WAIT for 60 s after their task, which a later runner read from
    # /proc/net/tcp, ~5 bytes a socket of the earlier task's choosing (red team, session 28).
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWNET), "unshare")
    # Inside, the same uid and gid as outside: files keep their owners; the namespace only grants mounting our own.
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(text)
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    size = int(settings.get("tmpfs_bytes") or DEFAULT_TMPFS_BYTES)
    wanted = (("/tmp", "1777"), ("/dev/shm", "1777"), (settings.get("home") or "", "0700"),
              (settings.get("outputs") or "", "0700"))
    fresh = [(path, mode) for path, mode in wanted if path and os.path.isdir(path)]
    for path, mode in fresh:
        # The outputs' with huge pages where the kernel allows them (exchange_tmpfs.MOUNT_OPTIONS: a 256 MiB output
        # is 128 pages to fault, read and free rather than 65,536)
        huge = (f"size={size},mode={mode},huge=within_size",) if path == settings.get("outputs") else ()
        _fresh_tmpfs(libc, path, (*huge, f"size={size},mode={mode}"), skip=[p for p, _m in fresh])
    for variable in ("TMPDIR", "XDG_CACHE_HOME"):  # they live in HOME, which is empty now
        if os.environ.get(variable):
            os.makedirs(os.environ[variable], mode=0o700, exist_ok=True)


def _mount_points() -> list[str]:
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        return [line.split()[4].replace("\\040", " ") for line in handle if len(line.split()) > 4]


def _fresh_tmpfs(libc: ctypes.CDLL, path: str, options: tuple[str, ...], skip: list[str]) -> None:
    """A new tmpfs over `path`, with the first of `options` the kernel takes. What the sandbox bound below it (the
    read-only inputs, the build cache, when they live under the host's /tmp) is bound again on top, read-only where it
    was; places in `skip` get their own tmpfs."""
    inside = sorted(m for m in _mount_points() if m.startswith(path.rstrip("/") + "/"))
    kept: list[str] = []
    for mount in inside:  # the outermost ones only: a recursive bind brings the rest
        if any(mount == k or mount.startswith(k + "/") for k in kept):
            continue
        if any(mount == s or mount.startswith(s + "/") for s in skip if s != path):
            continue
        kept.append(mount)
    handles = [os.open(m, os.O_PATH | os.O_DIRECTORY) for m in kept]
    try:
        mounted = any(libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, option.encode()) == 0
                      for option in options)  # the first the kernel takes, and no more
        _check(0 if mounted else -1, f"mount tmpfs {path}")
        for mount, fd in zip(kept, handles):
            os.makedirs(mount, mode=0o755, exist_ok=True)
            _check(libc.mount(f"/proc/self/fd/{fd}".encode(), mount.encode(), None, MS_BIND | MS_REC, None),
                   f"bind {mount} again")
        for place in skip:  # a later tmpfs goes here: its mount point must exist on this one
            if place != path and place.startswith(path.rstrip("/") + "/"):
                os.makedirs(place, mode=0o700, exist_ok=True)
    finally:
        for fd in handles:
            os.close(fd)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capabilities() -> None:
    """The user namespace gave this process every capability over its own namespaces: none is kept."""
    libc = _libc()
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # past the last capability this kernel knows (or none held: nothing to drop)
    data = (_CapData * 2)()
    _check(libc.capset(ctypes.byref(_CapHeader(_CAP_VERSION_3, 0)), data), "capset")


def _load_filters() -> None:
    from evaluator.isolation import pid_filter
    from evaluator.isolation.syscall_filter import filter_bpf

    bpf = filter_bpf()
    if bpf is None:
        raise OSError("libseccomp is missing: a runner never starts without its syscall filter")
    pid_filter.load_program(bpf)
    if not pid_filter.install():
        print("krl runner: no pid filter for this architecture", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- one task, seen from the judge

_warned: set[str] = set()


@dataclass
class TaskIsolation:
    """The trusted side's handle on one task: its cgroup (None where cgroups are unavailable) and its runner."""

    name: str
    host_pid: int
    cgroup: Optional[cgroups.TaskCgroup] = None
    runner_namespaces: bool = False
    setup_s: float = 0.0
    teardown: Optional[TeardownReport] = field(default=None)
    handles: dict[str, int] = field(default_factory=dict)  # runner_folder's, closed by end()

    def runner_folder(self, path: str) -> str:
        """runner_view(path) for a folder the trusted side reads and removes files in, resolved once, into a handle
        of its own (/proc/self/fd/<n>), at the first call: before the task is sent, so before any candidate code runs.
        The folders above it lie on the runner's own tmpfs, where a candidate renamed one and put an absolute link in
        its place: a path walked again at each read followed the link into the judge's root, and the judge read and
        deleted a host file of the candidate's choosing (red team, session 27). The handle names the folder it opened."""
        view = self.runner_view(path)
        if view == path:
            return path  # the judge's own view of the slot's folder: nothing of the runner's on the way
        if path not in self.handles:
            try:
                self.handles[path] = os.open(view, os.O_PATH | os.O_DIRECTORY)
            except OSError:  # the runner is gone already: nothing there to read
                return view
        return f"/proc/self/fd/{self.handles[path]}"

    def runner_view(self, path: str) -> str:
        """Where the trusted side finds `path` as the runner sees it (its tmpfs lives in the runner's mount
        namespace): /proc/<pid>/root/<path>. The plain path where runners share the zygote's view."""
        if not self.runner_namespaces or self.host_pid <= 0:
            return path
        return f"/proc/{self.host_pid}/root{os.path.abspath(path)}"

    def memory_bytes(self) -> int:
        """Memory charged to the task's group (memfd, shm and tmpfs included), 0 where there is no group."""
        return (self.cgroup.memory_bytes() or 0) if self.cgroup is not None else 0

    def cpu_time_ns(self) -> Optional[int]:
        return task_cpu_time_ns(self)

    def kill_leftovers(self, rounds: int = 20) -> int:
        """Every process of the task but the runner, killed by the trusted side once the runner has answered (the
        runner's pid filter stops it from signalling its own children, so this is no longer the runner's job).
        Cheap when there are none: one read of the group's process list. Returns how many were killed."""
        import signal

        if self.cgroup is None:
            from evaluator.isolation.proctree import kill_tree

            # Where the runner has no pid filter (no per-task sandbox) it kills its own leftovers, as before.
            wanted = self.runner_namespaces and self.host_pid > 0
            return len(kill_tree(self.host_pid, include_root=False)) if wanted else 0
        killed: set[int] = set()
        for _ in range(rounds):  # a process with SIGKILL pending cannot fork: each round leaves only newer ones
            others = [pid for pid in self.cgroup.pids() if pid != self.host_pid]
            if not others:
                break
            for pid in others:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.002)
        return len(killed)

    def end(self, wipe: tuple[str, ...] = ()) -> TeardownReport:
        for fd in self.handles.values():
            os.close(fd)
        self.handles.clear()
        if self.teardown is None:
            self.teardown = teardown_task(self.cgroup, self.host_pid, wipe)
        return self.teardown


def begin_task(runner_id: str, host_pid: int, memory_limit: Optional[int], runner_namespaces: bool,
               device_refusal: Optional[Refusal] = None) -> TaskIsolation:
    """Before the task is sent: the runner (host pid) moved into a fresh cgroup with the task's limits, one that refuses
    new opens of the GPU's device nodes (`device_refusal`, isolation/device_access.py) to the candidate's processes.
    Where cgroups cannot be made, the task runs without one (said once on stderr) and teardown falls
    back to the process tree; where the refusal cannot be set, without it (said once too)."""
    started = time.monotonic()
    task = TaskIsolation(f"{CGROUP_PREFIX}{os.getpid()}-{runner_id}", host_pid, runner_namespaces=runner_namespaces)
    if os.environ.get(TASK_ISOLATION_ENV, "1") != "0" and host_pid > 0:
        kernel_limit = int(memory_limit * KERNEL_LIMIT_HEADROOM) if memory_limit else None
        try:
            task.cgroup = cgroups.TaskCgroup.create(task.name, memory_bytes=kernel_limit)
            _deny_device_opens(task.cgroup, device_refusal, host_pid)
            task.cgroup.add(host_pid)
        except (cgroups.CgroupUnavailable, OSError) as exc:
            if task.cgroup is not None:
                task.cgroup.destroy()
                task.cgroup = None
            if "cgroup" not in _warned:
                _warned.add("cgroup")
                print(f"krl judge: tasks run without a cgroup of their own ({exc}); processes that leave the "
                      "runner's tree are not found at teardown", file=sys.stderr, flush=True)
    task.setup_s = time.monotonic() - started
    return task


def _deny_device_opens(group: cgroups.TaskCgroup, refusal: Optional[Refusal], runner_pid: int) -> None:
    if refusal is None:
        return
    try:
        group.deny_device_opens(list(refusal.nodes), except_pid=runner_pid if refusal.except_runner else 0)
    except OSError as exc:
        if "devices" not in _warned:
            _warned.add("devices")
            print(f"krl judge: a candidate's processes may open the GPU themselves ({exc}); its runner's group "
                  "cannot refuse it here", file=sys.stderr, flush=True)


def end_task(task: Optional[TaskIsolation], wipe: tuple[str, ...] = ()) -> Optional[TeardownReport]:
    """After the reply: everything of the task killed, its group removed, `wipe` emptied as the trusted side."""
    return task.end(wipe) if task is not None else None


def task_cpu_time_ns(task: TaskIsolation) -> Optional[int]:
    """The task's CPU time: from its cgroup (dead processes included), else the sum over the runner's living tree."""
    if task.cgroup is not None:
        used = task.cgroup.cpu_time_ns()
        if used is not None:
            return used
    if task.host_pid > 0 and os.path.exists(f"/proc/{task.host_pid}"):
        from evaluator.isolation.proctree import tree_cpu_time_ns

        return tree_cpu_time_ns(task.host_pid)
    return None
