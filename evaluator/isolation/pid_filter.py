"""A seccomp filter keyed on one process's own pid: the calls that signal, reschedule, re-limit, trace or read another
process are refused unless they name the caller itself (or 0, "myself"). Every runner shares the sandbox's uid with the
zygote and the spare runners, so uid checks alone would let a candidate stop or slow them; this filter does not.

Threads: a seccomp filter sees the call's number, architecture, instruction pointer and argument values, nothing of the
caller, so it cannot tell a thread id of the runner's own from the zygote's or a spare runner's (one PID namespace,
ids handed out in turn). A thread reaches itself through 0 ("the calling thread" for affinity, scheduling and
priority) and the runner's main thread through the runner's pid. A scheduling hint that names any other id (glibc's
pthread_setaffinity_np and pthread_setschedparam name the thread's id even for the caller itself; libgomp and
libtorch use them) is answered as done and does nothing (NO_EFFECT): no library sees an error for a hint it may make
about its own threads, and no other process is touched. Signals, limits, tracing and memory stay refused (EPERM).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from typing import Optional

# BPF opcodes (linux/filter.h) and seccomp constants (linux/seccomp.h, linux/audit.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_SECCOMP_DATA_NR, _SECCOMP_DATA_ARCH, _SECCOMP_DATA_ARGS = 0, 4, 16
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
_X32_SYSCALL_BIT = 0x40000000

OWN = "own"  # an allowed value: the pid the filter is keyed on
# syscall -> ((argument index, allowed values), ...): every listed argument must hold one of its values (low 32 bits).
# kill(0)/setpriority(PRIO_PGRP, 0) reach the caller's own process group: the runner leads one of its own.
RULES: dict[str, tuple[tuple[int, tuple], ...]] = {
    "kill": ((0, (0, OWN)),),
    # Joining another process group (the zygote's: same session) would turn kill(0) into a signal to the zygote.
    "setpgid": ((1, (0, OWN)),),
    "tkill": ((0, (OWN,)),),
    "tgkill": ((0, (OWN,)),),
    "rt_sigqueueinfo": ((0, (OWN,)),),
    "rt_tgsigqueueinfo": ((0, (OWN,)),),
    "pidfd_open": ((0, (OWN,)),),
    "sched_setscheduler": ((0, (0, OWN)),),
    "sched_setparam": ((0, (0, OWN)),),
    "sched_setattr": ((0, (0, OWN)),),
    "sched_setaffinity": ((0, (0, OWN)),),
    "setpriority": ((0, (0,)), (1, (0, OWN))),        # PRIO_PROCESS only: never a group or the whole user
    "ioprio_set": ((0, (1,)), (1, (0, OWN))),         # IOPRIO_WHO_PROCESS only
    "prlimit64": ((0, (0, OWN)),),
    "migrate_pages": ((0, (0, OWN)),),
    "move_pages": ((0, (0, OWN)),),
    "process_vm_readv": ((0, (OWN,)),),
    "process_vm_writev": ((0, (OWN,)),),
    "ptrace": ((0, ()),),                             # never, not even PTRACE_TRACEME
    "kcmp": ((0, ()),),
    "pidfd_getfd": ((0, ()),),
}

# (syscall, argument index) checks whose failure returns 0 without running the call: scheduling hints only, where
# doing nothing is a correct outcome for the caller (the kernel may always run a thread anywhere, at any priority).
NO_EFFECT = {("sched_setaffinity", 0), ("sched_setscheduler", 0), ("sched_setparam", 0), ("sched_setattr", 0),
             ("setpriority", 1), ("ioprio_set", 1)}

# System call numbers of the two architectures our machines have (this filter is built without libseccomp).
NUMBERS = {
    "x86_64": (0xC000003E, {
        "kill": 62, "setpgid": 109,
        "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "pidfd_open": 434,
        "sched_setscheduler": 144, "sched_setparam": 142, "sched_setattr": 314, "sched_setaffinity": 203,
        "setpriority": 141, "ioprio_set": 251, "prlimit64": 302, "migrate_pages": 256, "move_pages": 279,
        "process_vm_readv": 310, "process_vm_writev": 311, "ptrace": 101, "kcmp": 312, "pidfd_getfd": 438}),
    "aarch64": (0xC00000B7, {
        "kill": 129, "setpgid": 154,
        "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "pidfd_open": 434,
        "sched_setscheduler": 119, "sched_setparam": 118, "sched_setattr": 274, "sched_setaffinity": 122,
        "setpriority": 140, "ioprio_set": 30, "prlimit64": 261, "migrate_pages": 238, "move_pages": 239,
        "process_vm_readv": 270, "process_vm_writev": 271, "ptrace": 117, "kcmp": 272, "pidfd_getfd": 438}),
}


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


def filter_program(own_pid: int, machine: Optional[str] = None) -> Optional[bytes]:
    """The BPF program (sock_filter array) for `own_pid`, or None on an architecture this module does not know.
    Calls from another ABI (i386 on x86_64, x32) are refused outright: their numbers would slip past the checks."""
    machine = machine or platform.machine()
    if machine not in NUMBERS:
        return None
    arch, numbers = NUMBERS[machine]
    deny = _RET_ERRNO | errno.EPERM
    no_effect = _RET_ERRNO | 0  # SECCOMP_RET_ERRNO with errno 0: the call returns 0 and is not run
    # Each syscall's check block: load an argument, jump to the next check when it holds an allowed value, else deny.
    blocks: list[tuple[int, list[bytes]]] = []
    for name, checks in RULES.items():
        body: list[bytes] = []
        for index, allowed in checks:
            values = [own_pid if v == OWN else v for v in allowed]
            body.append(_insn(_LD_W_ABS, 0, 0, _SECCOMP_DATA_ARGS + 8 * index))  # low half (little-endian)
            for position, value in enumerate(values):
                # On a match: skip the remaining compares and this check's deny.
                body.append(_insn(_JEQ_K, len(values) - position, 0, value))
            body.append(_insn(_RET_K, 0, 0, no_effect if (name, index) in NO_EFFECT else deny))
        body.append(_insn(_RET_K, 0, 0, _RET_ALLOW))
        blocks.append((numbers[name], body))
    head = [_insn(_LD_W_ABS, 0, 0, _SECCOMP_DATA_ARCH), _insn(_JEQ_K, 1, 0, arch), _insn(_RET_K, 0, 0, deny),
            _insn(_LD_W_ABS, 0, 0, _SECCOMP_DATA_NR)]
    if machine == "x86_64":
        head += [_insn(_JGE_K, 0, 1, _X32_SYSCALL_BIT), _insn(_RET_K, 0, 0, deny)]
    # Dispatch: one compare per syscall, each jumping forward to its block (jump offsets are 8-bit: keep it short).
    dispatch_len = len(blocks) + 1
    program = list(head)
    offset = dispatch_len - 1  # from the first compare's next instruction to the first block, less the compares
    for position, (number, body) in enumerate(blocks):
        jump = (dispatch_len - position - 1) + sum(len(b) for _n, b in blocks[:position])
        if jump > 255:
            raise ValueError("pid filter too long for BPF's short jumps")
        program.append(_insn(_JEQ_K, jump, 0, number))
    del offset
    program.append(_insn(_RET_K, 0, 0, _RET_ALLOW))  # any other syscall: not this filter's business
    for _number, body in blocks:
        program += body
    return b"".join(program)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def load_program(program: bytes) -> None:
    """Install a BPF program on the calling thread (and the children it makes later). Sets no_new_privs, which a
    filter needs without CAP_SYS_ADMIN. Call it while the process has one thread: others would stay unfiltered."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")


def install(own_pid: Optional[int] = None) -> bool:
    """Key the filter on this process (its pid inside its PID namespace) and load it; False where unsupported."""
    program = filter_program(os.getpid() if own_pid is None else own_pid)
    if program is None:
        return False
    load_program(program)
    return True
