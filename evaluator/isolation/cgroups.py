"""Per-task control groups, made and removed by the trusted side: cgroup v2 where it is mounted, otherwise the v1
memory, pids, freezer and cpuacct hierarchies. A task's group bounds its memory (shmem, memfd and tmpfs pages count),
its process count, reports its CPU time, and is killed as a whole, which also catches processes that left the tree."""

from __future__ import annotations

import errno
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Optional

CGROUP_ROOT = "/sys/fs/cgroup"
V1_CONTROLLERS = ("memory", "pids", "freezer", "cpuacct")
V2_CONTROLLERS = ("memory", "pids")
TCP_BUFFER_BYTES = 16 * 2**20  # v1: a task's socket buffers at most (memory.kmem.tcp.limit_in_bytes)
V1_DEVICES = "devices"  # a v1 group's folder there is made only to refuse device opens (deny_device_opens)
PARENT_NAME = "krl-tasks"
DEFAULT_PIDS_MAX = 4096
KILL_WAIT_S = 5.0           # the longest a kill waits for the group to empty: teardown must never hang
FREEZE_WAIT_S = 1.0
_POLL_S = 0.005


class CgroupUnavailable(Exception):
    """No writable cgroup hierarchy here (not root, not mounted, or a controller missing); the message says which."""


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(value)


def _own_cgroup_paths() -> dict[str, str]:
    """{controller or '' (v2): this process's cgroup path} from /proc/self/cgroup."""
    found: dict[str, str] = {}
    for line in _read("/proc/self/cgroup").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            found[""] = parts[2]
        for controller in parts[1].split(","):
            if controller:
                found[controller] = parts[2]
    return found


def detect_version(root: str = CGROUP_ROOT) -> str:
    """'v2' (a unified hierarchy at root), 'v1' (all four v1 controllers mounted), or '' (neither)."""
    if os.path.exists(os.path.join(root, "cgroup.controllers")):
        return "v2"
    if all(os.path.exists(os.path.join(root, c, "cgroup.procs")) for c in V1_CONTROLLERS):
        return "v1"
    return ""


def _parent_dirs_v1(root: str, devices: bool = False) -> dict[str, str]:
    """Below our own group in each v1 hierarchy: the enclosing limits (a job's, a systemd slice's) still apply. With
    `devices`, the devices hierarchy's too, where it is mounted."""
    own = _own_cgroup_paths()
    names = V1_CONTROLLERS
    if devices and os.path.exists(os.path.join(root, V1_DEVICES, "cgroup.procs")):
        names = (*names, V1_DEVICES)
    return {c: os.path.join(root, c, own.get(c, "/").lstrip("/"), PARENT_NAME) for c in names}


def _parent_dir_v2(root: str) -> str:
    """Below our own group where controllers can be delegated there; else below the root (v2 forbids enabling
    controllers in a group that holds processes, which our own group does)."""
    own = os.path.join(root, _own_cgroup_paths().get("", "/").lstrip("/"))
    for base in dict.fromkeys([own, root]):
        parent = os.path.join(base, PARENT_NAME)
        try:
            os.makedirs(parent, exist_ok=True)
            for where in (base, parent):
                enabled = set(_read(os.path.join(where, "cgroup.subtree_control")).split())
                wanted = [c for c in V2_CONTROLLERS if c not in enabled]
                if wanted:
                    _write(os.path.join(where, "cgroup.subtree_control"), " ".join("+" + c for c in wanted))
            return parent
        except OSError:
            continue
    raise CgroupUnavailable(f"cannot delegate the {', '.join(V2_CONTROLLERS)} controllers under {root}")


@dataclass
class TaskCgroup:
    """One task's group: `dirs` holds one folder per v1 hierarchy ({'memory': ..., ...}) or one v2 folder ('')."""

    name: str
    version: str
    dirs: dict[str, str] = field(default_factory=dict)
    memory_limit: Optional[int] = None
    removed: bool = False

    # ---- making one
    @classmethod
    def create(cls, name: str, memory_bytes: Optional[int] = None, pids_max: int = DEFAULT_PIDS_MAX,
               root: str = CGROUP_ROOT) -> "TaskCgroup":
        """A fresh, empty group with the limits set. Raises CgroupUnavailable where that cannot be done."""
        version = detect_version(root)
        if not version:
            raise CgroupUnavailable(f"no cgroup v2 and no v1 {'/'.join(V1_CONTROLLERS)} hierarchies under {root}")
        try:
            if version == "v2":
                dirs = {"": os.path.join(_parent_dir_v2(root), name)}
            else:
                dirs = {c: os.path.join(p, name) for c, p in _parent_dirs_v1(root).items()}
            group = cls(name, version, {})
            for controller, path in dirs.items():
                if os.path.isdir(path):  # a leftover of a crashed judge with the same name: empty it first
                    TaskCgroup(name, version, {controller: path}).destroy()
                _make_group_dir(path)
                group.dirs[controller] = path
            group._set_limits(memory_bytes, pids_max)
            return group
        except OSError as exc:
            if "group" in locals():
                group.destroy()
            raise CgroupUnavailable(f"cannot make the task's cgroup ({version}): {exc}") from None

    def _set_limits(self, memory_bytes: Optional[int], pids_max: int) -> None:
        self.memory_limit = memory_bytes
        if self.version == "v2":
            path = self.dirs[""]
            if memory_bytes:
                _write(os.path.join(path, "memory.max"), str(memory_bytes))
                if os.path.exists(os.path.join(path, "memory.swap.max")):
                    _write(os.path.join(path, "memory.swap.max"), "0")
            _write(os.path.join(path, "pids.max"), str(pids_max))
            return
        memory = self.dirs["memory"]
        if memory_bytes:
            # v1 charges page cache, shmem (tmpfs, memfd, SysV shm) and anonymous pages alike to limit_in_bytes.
            _write(os.path.join(memory, "memory.limit_in_bytes"), str(memory_bytes))
            memsw = os.path.join(memory, "memory.memsw.limit_in_bytes")
            if os.path.exists(memsw):  # swap must not be a way around the limit
                try:
                    _write(memsw, str(memory_bytes))
                except OSError:
                    pass
            # But not TCP's buffers: v1 books them only once this limit is written (v2 charges them to memory.max).
            # ~1,500 loopback connections filled and never read held 2.2 GiB of the host's beside a 2 GiB limit, its
            # group showing 3 MiB (red team, session 28). A task needs next to none: its own network namespace
            # has its loopback down.
            tcp = os.path.join(memory, "memory.kmem.tcp.limit_in_bytes")
            if os.path.exists(tcp):
                try:
                    _write(tcp, str(min(memory_bytes, TCP_BUFFER_BYTES)))
                except OSError:  # a kernel that refuses it (deprecated since 6.x): the task's other limits stand
                    pass
        _write(os.path.join(self.dirs["pids"], "pids.max"), str(pids_max))

    def deny_device_opens(self, nodes: list[tuple[int, int]], root: str = CGROUP_ROOT, except_pid: int = 0) -> None:
        """These character devices ((major, minor)) refused to every later open() and mknod() in the group
        (descriptors already open stay usable), except by the thread group `except_pid` (a pid of the initial
        namespace, v2 only): isolation/device_access.py. Call before add(). Raises OSError where refused."""
        from evaluator.isolation import device_access

        if not nodes:
            return
        if self.version == "v2":
            device_access.deny_v2(self.dirs[""], nodes, except_pid)
            return
        if except_pid:
            raise OSError("cgroup v1's devices.deny refuses a device to every process of a group, the runner too")
        parent = _parent_dirs_v1(root, devices=True).get(V1_DEVICES)
        if parent is None:
            raise OSError(f"no v1 {V1_DEVICES} hierarchy under {root}")
        path = os.path.join(parent, self.name)
        if os.path.isdir(path):  # a leftover of a crashed judge with the same name
            TaskCgroup(self.name, self.version, {V1_DEVICES: path}).destroy()
        _make_group_dir(path)
        self.dirs[V1_DEVICES] = path
        device_access.deny_v1(path, nodes)

    # ---- using one
    def add(self, pid: int) -> None:
        """Move a process (all its threads) into the group; its later children are born there."""
        for path in self.dirs.values():
            _write(os.path.join(path, "cgroup.procs"), str(pid))

    def pids(self) -> list[int]:
        found: set[int] = set()
        for path in self.dirs.values():
            found.update(int(p) for p in _read(os.path.join(path, "cgroup.procs")).split() if p.isdigit())
        return sorted(found)

    def cpu_time_ns(self) -> Optional[int]:
        """CPU time of everything that ran in the group (dead processes included); None where unreadable."""
        if self.version == "v2":
            for line in _read(os.path.join(self.dirs[""], "cpu.stat")).splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec" and value.strip().isdigit():
                    return int(value) * 1000
            return None
        text = _read(os.path.join(self.dirs["cpuacct"], "cpuacct.usage")).strip()
        return int(text) if text.isdigit() else None

    def memory_bytes(self) -> Optional[int]:
        """Memory the group holds that cannot simply be dropped: all charged pages (anonymous, shmem, memfd, tmpfs,
        SysV shm) less the inactive file cache the kernel reclaims first under the limit."""
        folder = self.dirs["" if self.version == "v2" else "memory"]
        usage = _read(os.path.join(folder, "memory.current" if self.version == "v2" else "memory.usage_in_bytes"))
        if not usage.strip().isdigit():
            return None
        inactive_key = "inactive_file" if self.version == "v2" else "total_inactive_file"
        inactive = 0
        for line in _read(os.path.join(folder, "memory.stat")).splitlines():
            key, _, value = line.partition(" ")
            if key == inactive_key and value.strip().isdigit():
                inactive = int(value)
        return max(0, int(usage) - inactive)

    def oom_kills(self) -> int:
        """How many processes of the group the kernel killed at its memory limit."""
        name = "memory.events" if self.version == "v2" else "memory.oom_control"
        for line in _read(os.path.join(self.dirs["" if self.version == "v2" else "memory"], name)).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    # ---- stopping it for a while (the judge's reference windows) and ending it
    def freeze(self, wait_s: float, poll_s: float = _POLL_S) -> Optional[bool]:
        """Every process of the group stopped by the kernel's freezer, waiting at most wait_s for it to say so: True
        once frozen, False when it was not within wait_s (still freezing: thaw() it), None where this group cannot be
        frozen at all (the write was refused)."""
        if not self._freeze(True):
            return None
        deadline = time.monotonic() + wait_s
        while not self._frozen():
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll_s)
        return True

    def thaw(self) -> None:
        self._freeze(False)

    def _freeze(self, frozen: bool) -> bool:
        try:
            if self.version == "v2":
                _write(os.path.join(self.dirs[""], "cgroup.freeze"), "1" if frozen else "0")
            else:
                _write(os.path.join(self.dirs["freezer"], "freezer.state"), "FROZEN" if frozen else "THAWED")
        except (OSError, KeyError):
            return False
        return True

    def _frozen(self) -> bool:
        if self.version == "v2":
            return "frozen 1" in _read(os.path.join(self.dirs[""], "cgroup.events"))
        return _read(os.path.join(self.dirs["freezer"], "freezer.state")).strip() == "FROZEN"

    def _wait_frozen(self, deadline: float) -> None:
        while time.monotonic() < deadline and not self._frozen():
            time.sleep(_POLL_S)

    def kill(self, wait_s: float = KILL_WAIT_S) -> bool:
        """SIGKILL every process in the group; True once it is empty (bounded: never waits past wait_s)."""
        deadline = time.monotonic() + wait_s
        kill_file = os.path.join(self.dirs.get("", ""), "cgroup.kill")
        if self.version == "v2" and os.path.exists(kill_file):
            try:
                _write(kill_file, "1")  # the kernel kills the whole group, forks in flight included
            except OSError:
                pass
        else:
            # Kill rounds first: a process with SIGKILL pending cannot complete a fork, so each round leaves only
            # children born since the last read. Freezing (slower: tens of ms) is the fallback for what still remains.
            for _ in range(3):
                if not self._kill_listed():
                    return True
            if self.pids():
                self._freeze(True)
                self._wait_frozen(min(deadline, time.monotonic() + FREEZE_WAIT_S))
                self._kill_listed()
                self._freeze(False)
        while time.monotonic() < deadline:
            if not self._kill_listed():  # dying processes leave the list once they have exited
                return True
            time.sleep(_POLL_S)
        return not self.pids()

    def _kill_listed(self) -> list[int]:
        listed = self.pids()
        for pid in listed:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return listed

    def remove(self) -> bool:
        """rmdir every folder of the group (it must be empty), and the shared parent once no group is left in it (an
        empty child would keep whoever owns the enclosing group, a job runner, from removing theirs). True when all of
        the group's folders are gone."""
        self.reclaim()
        gone = True
        for path in self.dirs.values():
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                gone = gone and exc.errno == errno.ENOENT
                continue
            if self.version == "v1":  # v2's parent carries delegated controllers: kept
                try:
                    os.rmdir(os.path.dirname(path))
                except OSError:
                    pass  # other tasks' groups are still in it
        self.removed = gone
        return gone

    def reclaim(self) -> None:
        """What the emptied group still has charged, reclaimed before it is removed: the kernel memory its processes
        left (negative dentries, inodes) is otherwise charged to the parent and stays. A task that looked up 4M missing
        names under a read-only host folder left 8M dentries and 3.6 GB of slab on the host over three runs (red team,
        session 29); on this 2-core VM 300K of them were freed in 0.19 s. v1: memory.force_empty; v2: memory.reclaim
        of what the group still uses. Best effort: what cannot be reclaimed goes to the parent as before."""
        try:
            if self.version == "v2":
                folder = self.dirs[""]
                usage = _read(os.path.join(folder, "memory.current")).strip()
                if usage.isdigit() and int(usage):
                    _write(os.path.join(folder, "memory.reclaim"), usage)
            elif "memory" in self.dirs:
                _write(os.path.join(self.dirs["memory"], "memory.force_empty"), "0")
        except OSError:  # EAGAIN when not all of it could be reclaimed; a group already gone
            pass

    def destroy(self, wait_s: float = KILL_WAIT_S) -> bool:
        """kill, then remove; True when the group is empty and gone."""
        emptied = self.kill(wait_s)
        return self.remove() and emptied


def _make_group_dir(path: str) -> None:
    """mkdir the group, making the shared parent first; another judge may remove an empty parent meanwhile: retried."""
    for attempt in range(3):
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.mkdir(path)
            return
        except FileNotFoundError:
            if attempt == 2:
                raise


def available(root: str = CGROUP_ROOT) -> str:
    """'' when a task group can be made here, else why not (for `krl doctor` and the slot's start)."""
    try:
        group = TaskCgroup.create(f"probe-{os.getpid()}", memory_bytes=64 * 2**20, root=root)
    except CgroupUnavailable as exc:
        return str(exc)
    group.destroy()
    return ""


def sweep_stale(prefix: str, alive_pid: int, root: str = CGROUP_ROOT) -> int:
    """Kill and remove task groups named `prefix<pid>-...` whose owner pid is no longer running (a judge that was
    killed before its teardown). Returns how many were removed."""
    version = detect_version(root)
    if version == "v1":
        parents = _parent_dirs_v1(root, devices=True)
    elif version == "v2":
        try:
            parents = {"": _parent_dir_v2(root)}
        except CgroupUnavailable:
            return 0
    else:
        return 0
    removed = 0
    names: set[str] = set()
    for parent in parents.values():
        try:
            names.update(n for n in os.listdir(parent) if n.startswith(prefix))
        except OSError:
            continue
    for name in names:
        owner = name[len(prefix):].split("-", 1)[0]
        if not owner.isdigit() or int(owner) == alive_pid or os.path.exists(f"/proc/{owner}"):
            continue
        group = TaskCgroup(name, version, {c: os.path.join(p, name) for c, p in parents.items()
                                           if os.path.isdir(os.path.join(p, name))})
        removed += bool(group.dirs) and group.destroy(wait_s=1.0)
    return removed
