"""A seccomp filter for candidate code, compiled to BPF through libseccomp (ctypes; libseccomp2 comes with apt).
It refuses the system calls a kernel or another process is attacked through; bwrap loads it just before the exec."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import tempfile
from typing import Optional

# Refused with EPERM. Nothing a kernel written by a model, torch, Triton or the CUDA driver needs; each is a way to
# reach another process (ptrace, process_vm_*), the kernel's less-travelled code (bpf, userfaultfd, io_uring, keys,
# perf), or the machine (modules, kexec, mounts, namespaces, clocks, swap, reboot).
DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "bpf", "userfaultfd", "perf_event_open", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key", "lookup_dcookie",
    "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick",
    "mount_setattr", "unshare", "setns", "open_by_handle_at", "name_to_handle_at", "chroot",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
    "swapon", "swapoff", "acct", "quotactl", "syslog", "vhangup", "iopl", "ioperm",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    # Secret memory's pages leave the kernel's direct map, whose huge mappings it splits for good: ~64 MiB of it split
    # 10 GiB of a host's 1 GiB pages until reboot (red team, session 28). Nothing torch, Triton or CUDA needs.
    "memfd_secret",
    # Linux AIO carries RWF_NOWAIT in memory a filter cannot read (see _REFUSED_WITH_ARGUMENT); nothing here uses it.
    "io_setup",
    # A signal through a pidfd: a /proc/<pid> folder's descriptor is one, so the pid filter's check of pidfd_open's
    # pid is passed by; the zygote killed that way made a wrong candidate's verdict an infrastructure failure (red
    # team, session 29). process_madvise: madvise on a pidfd, past the page-cache rules below.
    "pidfd_send_signal", "process_madvise",
    # Inotify and fanotify instances are counted per uid (128 by default), and every runner on the host shares one:
    # a task holding them all would fail another slot's task that needs one (red team, session 29, by reading).
    "inotify_init", "inotify_init1", "fanotify_init",
)
# Calls refused for one argument's value: (system call, argument, value refused, None), or (system call, argument,
# None, flag) where the argument is a set of flags.
_REFUSED_WITH_ARGUMENT = (
    # The host's page cache as a channel between tasks (red team, session 29): a task evicted pages of a host file it
    # may read (fadvise DONTNEED, or madvise PAGEOUT/COLD on a mapping of it), read some back, and a later task read
    # which were resident, exactly, with preadv2's RWF_NOWAIT (512 bytes a task carried bit for bit).
    ("fadvise64", 3, 4, None),  # POSIX_FADV_DONTNEED
    ("madvise", 2, 20, None),  # MADV_COLD
    ("madvise", 2, 21, None),  # MADV_PAGEOUT
    ("preadv2", 5, None, 0x8),  # RWF_NOWAIT
    ("pwritev2", 5, None, 0x8),
    # A descriptor's owner is sent SIGIO, or any signal F_SETSIG names, when it becomes ready: set to the zygote's pid
    # it killed the zygote past the pid filter (red team, session 29). Nothing torch, Triton or CUDA needs sets one.
    ("fcntl", 1, 8, None),  # F_SETOWN
    ("fcntl", 1, 15, None),  # F_SETOWN_EX
    ("ioctl", 1, 0x8901, None),  # FIOSETOWN
    ("ioctl", 1, 0x8902, None),  # SIOCSPGRP
)
# clone with any of these flags makes a namespace (a nested user namespace is the usual first step of a kernel
# exploit); clone3 hides its flags in memory a filter cannot read, so it answers ENOSYS and libc falls back to clone.
_CLONE_NEW_FLAGS = (0x10000000, 0x00020000, 0x20000000, 0x40000000, 0x08000000, 0x04000000, 0x02000000)
_ACT_ALLOW = 0x7FFF0000
_CMP_NE = 1
_CMP_EQ = 4
_CMP_MASKED_EQ = 7
PR_SET_DUMPABLE = 4


def _act_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


@functools.lru_cache(maxsize=1)
def _library() -> Optional[ctypes.CDLL]:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    return lib


@functools.lru_cache(maxsize=1)
def filter_bpf() -> Optional[bytes]:
    """The filter as BPF for this machine's architecture, or None where libseccomp is missing."""
    lib = _library()
    if lib is None:
        return None
    ctx = lib.seccomp_init(_ACT_ALLOW)
    if not ctx:
        return None
    try:
        for name in DENIED:
            number = lib.seccomp_syscall_resolve_name(name.encode())
            if number >= 0 and lib.seccomp_rule_add_array(ctx, _act_errno(errno.EPERM), number, 0, None) != 0:
                return None
        clone = lib.seccomp_syscall_resolve_name(b"clone")
        for flag in _CLONE_NEW_FLAGS:
            compare = _ArgCmp(0, _CMP_MASKED_EQ, flag, flag)
            if lib.seccomp_rule_add_array(ctx, _act_errno(errno.EPERM), clone, 1, ctypes.byref(compare)) != 0:
                return None
        # prlimit64(pid, resource, new, old) on another process (pid != 0, new != NULL): the zygote and the next
        # request's pre-warmed runner run as the same sandbox user, and their lowered limits would fail later
        # candidates. A process's own limits (setrlimit is prlimit64 with pid 0) stay allowed.
        prlimit = lib.seccomp_syscall_resolve_name(b"prlimit64")
        other_pid = (_ArgCmp * 2)(_ArgCmp(0, _CMP_NE, 0, 0), _ArgCmp(2, _CMP_NE, 0, 0))
        if prlimit >= 0 and lib.seccomp_rule_add_array(ctx, _act_errno(errno.EPERM), prlimit, 2, other_pid) != 0:
            return None
        # setpriority/ioprio_set beyond the caller itself (another pid, its process group, or the whole sandbox user,
        # which is every slot's runners on this host) would slow other evaluations; nice() on oneself stays allowed.
        for name, own_kind in ((b"setpriority", 0), (b"ioprio_set", 1)):  # PRIO_PROCESS, IOPRIO_WHO_PROCESS
            number = lib.seccomp_syscall_resolve_name(name)
            for compare in (_ArgCmp(0, _CMP_NE, own_kind, 0), _ArgCmp(1, _CMP_NE, 0, 0)):
                if number >= 0 and lib.seccomp_rule_add_array(ctx, _act_errno(errno.EPERM), number, 1,
                                                               ctypes.byref(compare)) != 0:
                    return None
        # prctl(PR_SET_DUMPABLE, non-zero): the runner makes itself non-dumpable before candidate code runs, so its
        # /proc files stay root's (a dumpable process owns them: /proc/self/autogroup among them) and no process of
        # the same user may attach to it or read its memory; turning it back on is refused.
        prctl = lib.seccomp_syscall_resolve_name(b"prctl")
        dumpable_on = (_ArgCmp * 2)(_ArgCmp(0, _CMP_EQ, PR_SET_DUMPABLE, 0), _ArgCmp(1, _CMP_NE, 0, 0))
        if prctl >= 0 and lib.seccomp_rule_add_array(ctx, _act_errno(errno.EPERM), prctl, 2, dumpable_on) != 0:
            return None
        for name, argument, value, flag in _REFUSED_WITH_ARGUMENT:
            number = lib.seccomp_syscall_resolve_name(name.encode())
            compare = (_ArgCmp(argument, _CMP_EQ, value, 0) if flag is None
                       else _ArgCmp(argument, _CMP_MASKED_EQ, flag, flag))
            if number >= 0 and lib.seccomp_rule_add_array(ctx, _act_errno(errno.EPERM), number, 1,
                                                           ctypes.byref(compare)) != 0:
                return None
        clone3 = lib.seccomp_syscall_resolve_name(b"clone3")
        if clone3 >= 0 and lib.seccomp_rule_add_array(ctx, _act_errno(errno.ENOSYS), clone3, 0, None) != 0:
            return None
        with tempfile.TemporaryFile() as handle:
            if lib.seccomp_export_bpf(ctx, handle.fileno()) != 0:
                return None
            handle.seek(0)
            return handle.read()
    finally:
        lib.seccomp_release(ctx)


def filter_fd() -> Optional[int]:
    """A fresh file descriptor holding the BPF, positioned at its start (bwrap --seccomp reads it to the end, so
    every start needs its own). The caller passes it to the child and closes it after the start."""
    bpf = filter_bpf()
    if bpf is None:
        return None
    fd = os.memfd_create("krl-seccomp", 0)
    os.write(fd, bpf)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
