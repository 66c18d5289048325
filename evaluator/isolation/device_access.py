"""A task's cgroup refuses new opens of the GPUs' device nodes to every process but the runner: no process the candidate
starts can make a CUDA context of its own (cgroup v2: a BPF device program keyed on the opener; v1: devices.deny)."""

from __future__ import annotations

import ctypes
import glob
import os
import platform
import stat
import struct
import sys
from dataclasses import dataclass
from typing import Iterable, Optional

# Why: a process of the candidate's with a CUDA context of its own shares the GPU with the judge's by time slices, and
# kernels it queues just before the judge times the reference run on into that window (a spinning process doubled a
# timed batch on an H200), where neither the runner's freezing (it stops launches, not queued work) nor the CPU watch
# can reach them. The device cgroup checks a device node at open() and mknod() only, so descriptors opened before
# stay usable, and CUDA in a child fails to initialise.
# By default ("runner") every process of the task's group but the runner's own is refused: CUPTI attaches in the task
# (the runner's kernel checks profile the candidate; worker_setup.prepare_runner keeps it out of the warm-up, where it
# cost 4-6 s of CPU and slowed a torch candidate's timing) and its first session opens the GPU's node again. With the
# runner refused too ("1", session 27's opt-in) that profile recorded no kernels, so own_kernel_time_fraction was None
# and the lazy-kernel rule had nothing to read (calls C-E, tests/bench/probe_device_opens.py). The program reads the
# opener's thread-group id (bpf_get_current_pid_tgid, open to device programs since Linux 6.10), an id of the initial
# pid namespace: so only a judge that runs there can name its runner, and only on cgroup v2 (v1's devices.deny keys on
# nothing but the device). Elsewhere "runner" refuses nothing (said once by the judge). "0" turns it off.
DENY_ENV = "KRL_WORKER_GPU_OPENS_DENIED"
NODE_PATTERNS = ("/dev/nvidia[0-9]*",)  # a context is made on a GPU's own node, which each process opens itself
INITIAL_PID_NAMESPACE = 0xEFFFFFFC  # PROC_PID_INIT_INO: /proc/self/ns/pid's inode in the initial pid namespace

_BPF_SYSCALL = {"x86_64": 321, "aarch64": 280}
_BPF_PROG_LOAD, _BPF_PROG_ATTACH = 5, 8
_BPF_PROG_TYPE_CGROUP_DEVICE, _BPF_CGROUP_DEVICE, _BPF_F_ALLOW_MULTI = 15, 6, 2
_DEV_CHAR = 2  # BPF_DEVCG_DEV_CHAR, the low 16 bits of bpf_cgroup_dev_ctx.access_type
_GET_CURRENT_PID_TGID = 14  # BPF_FUNC_get_current_pid_tgid


def gpu_nodes(patterns: Iterable[str] = NODE_PATTERNS) -> list[tuple[int, int]]:
    """(major, minor) of the character devices matching `patterns` (a GPU's node: 195 and its index)."""
    nodes = set()
    for pattern in patterns:
        for path in glob.glob(pattern):
            try:
                found = os.stat(path)
            except OSError:
                continue
            if stat.S_ISCHR(found.st_mode):
                nodes.add((os.major(found.st_rdev), os.minor(found.st_rdev)))
    return sorted(nodes)


def mode() -> str:
    """DENY_ENV as one of "runner" (the default: every process but the runner's), "1" (every process) and "0"."""
    value = os.environ.get(DENY_ENV, "runner").strip()
    return value if value in ("0", "1") else "runner"


@dataclass(frozen=True)
class Refusal:
    """The device nodes a task's group refuses to open, and whether its runner may still open them ("runner")."""
    nodes: tuple[tuple[int, int], ...]
    except_runner: bool


def refusal_for(device: str) -> Optional[Refusal]:
    """What each task's group on `device` refuses (mode()): nothing on a CPU or with "0", nor with "runner" where this
    process cannot name its runners to a device program (outside the initial pid namespace: said once on stderr)."""
    chosen = mode()
    if not device.startswith("cuda") or chosen == "0":
        return None
    if chosen == "runner" and not pids_are_global():
        print("krl judge: a candidate's processes may open the GPU themselves: this judge runs in a pid namespace of "
              f"its own, so its cgroups cannot tell the runner from them ({DENY_ENV}=1 refuses the runner too, and "
              "its kernel profile with it)", file=sys.stderr, flush=True)
        return None
    return Refusal(tuple(gpu_nodes()), except_runner=chosen == "runner")


def pids_are_global() -> bool:
    """Whether this process's pids are the kernel's own (the initial pid namespace), which a device program reads."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino == INITIAL_PID_NAMESPACE
    except OSError:
        return False


def deny_v1(devices_dir: str, nodes: Iterable[tuple[int, int]]) -> None:
    """v1: the group's devices.deny, one rule per node (read, write and mknod)."""
    for major, minor in nodes:
        with open(os.path.join(devices_dir, "devices.deny"), "w", encoding="ascii") as handle:
            handle.write(f"c {major}:{minor} rwm")


def deny_v2(group_dir: str, nodes: list[tuple[int, int]], except_pid: int = 0) -> None:
    """v2: a device program attached to the group (beside any its ancestors have: each must allow an open), which lets
    the thread group `except_pid` (a pid of the initial namespace; 0: none) open the nodes still. Raises OSError where
    the kernel refuses it (before Linux 6.10 a program that reads the opener's pid)."""
    program = ctypes.create_string_buffer(_program(nodes, except_pid))  # both alive until the load returns
    license_name = ctypes.create_string_buffer(b"GPL")
    prog_fd = _bpf(_BPF_PROG_LOAD, struct.pack("=IIQQIIQ", _BPF_PROG_TYPE_CGROUP_DEVICE, (len(program) - 1) // 8,
                                                 ctypes.addressof(program), ctypes.addressof(license_name), 0, 0, 0))
    try:
        group_fd = os.open(group_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            _bpf(_BPF_PROG_ATTACH, struct.pack("=IIII", group_fd, prog_fd, _BPF_CGROUP_DEVICE, _BPF_F_ALLOW_MULTI))
        finally:
            os.close(group_fd)
    finally:
        os.close(prog_fd)  # the group holds the program while attached, and drops it with the group


def _program(nodes: list[tuple[int, int]], except_pid: int = 0) -> bytes:
    """r0 = 0 (refuse) for a listed character device opened by any thread group but `except_pid`, else 1 (allow).
    bpf_cgroup_dev_ctx is {u32 access_type, u32 major, u32 minor}; a node is compared as major << 20 | minor (Linux's
    own dev_t split, so one compare each)."""
    def insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
        return struct.pack("=BBhi", code, dst | (src << 4), off, imm)

    # jeq r3, node, +n: past the checks left and the allow pair, to the refusal
    checks = [insn(0x15, dst=3, off=len(nodes) - index + 1, imm=(major << 20) | minor)
              for index, (major, minor) in enumerate(nodes)]
    body = [
        insn(0x61, dst=2, src=1, off=0),                 # r2 = ctx->access_type
        insn(0x57, dst=2, imm=0xFFFF),                   # r2 &= 0xffff: the device's type
        insn(0x55, dst=2, off=len(checks) + 4, imm=_DEV_CHAR),  # not a character device: allowed
        insn(0x61, dst=3, src=1, off=4),                 # r3 = ctx->major
        insn(0x67, dst=3, imm=20),                       # r3 <<= 20
        insn(0x61, dst=4, src=1, off=8),                 # r4 = ctx->minor
        insn(0x4F, dst=3, src=4),                        # r3 |= r4
        *checks,
    ]
    opener = []
    if except_pid:
        opener = [
            insn(0xBF, dst=6, src=1),                    # r6 = ctx (the helper's call clobbers r1-r5)
            insn(0x85, imm=_GET_CURRENT_PID_TGID),       # r0 = tgid << 32 | pid
            insn(0x77, dst=0, imm=32),                   # r0 >>= 32: the opener's thread group
            insn(0x15, dst=0, off=len(body) + 1, imm=except_pid),  # the excepted group: allowed
            insn(0xBF, dst=1, src=6),                    # r1 = ctx
        ]
    return b"".join([
        *opener, *body,
        insn(0xB7, dst=0, imm=1), insn(0x95),            # allowed
        insn(0xB7, dst=0, imm=0), insn(0x95),            # refused
    ])


def _bpf(command: int, attr: bytes) -> int:
    number = _BPF_SYSCALL.get(platform.machine())
    if number is None:
        raise OSError(f"bpf() on {platform.machine()} is not known here")
    buffer = ctypes.create_string_buffer(attr.ljust(128, b"\0"), 128)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    result = libc.syscall(ctypes.c_long(number), ctypes.c_long(command), buffer, ctypes.c_ulong(128))
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"bpf({command}): {os.strerror(code)}")
    return int(result)
