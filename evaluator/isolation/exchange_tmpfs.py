"""A slot's exchange folders (whole tensors between judge and runner) on RAM-backed tmpfs mounts that only its judge
host and the processes it starts can see, so no tensor's pages are written back to a disk-backed /tmp."""

from __future__ import annotations

import ctypes
import os
from typing import Optional, Sequence

EXCHANGE_TMPFS_ENV = "KRL_WORKER_EXCHANGE_TMPFS"  # "0": the folders stay on the filesystem of the pool's root
# Why: on an H100 host whose /tmp is ext4, a 48-kernel batch wrote several GiB a task of inputs and outputs there
# (256 MiB tensors, five trials and the timing's sets); the host sampler found judges and runners blocked in the
# disk's writeback throttling (rq_qos_wait, submit_bio_wait) beside the driver's own lock.
TMPFS_MAGIC = 0x01021994
_CLONE_NEWNS = 0x00020000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x4000, 0x40000
# A cap, not a reservation: tmpfs holds only what is written, and the slot empties both folders after every task.
# Huge pages where the kernel has them: a 256 MiB tensor file is 128 pages to fault, fill and free rather than 65,536.
MOUNT_OPTIONS = (b"size=50%,huge=within_size", b"size=50%")


class _Statfs(ctypes.Structure):
    """struct statfs on 64-bit Linux: the filesystem's magic number first, 120 bytes in all."""
    _fields_ = [("f_type", ctypes.c_long), ("rest", ctypes.c_byte * 112)]


def is_tmpfs(path: str) -> bool:
    """Whether `path` lies on a tmpfs (statfs's magic number)."""
    found = _Statfs()
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.statfs(os.fsencode(path), ctypes.byref(found)) == 0 and found.f_type == TMPFS_MAGIC


def _turned_off() -> bool:
    return os.environ.get(EXCHANGE_TMPFS_ENV, "1").strip() == "0"


def why_not_here(folder: str) -> str:
    """What mount_private_tmpfs would answer for `folder` on this machine, without mounting anything ("" when the
    exchange would be on tmpfs): for `krl doctor`."""
    if _turned_off():
        return f"turned off ({EXCHANGE_TMPFS_ENV}=0)"
    if is_tmpfs(folder) or os.geteuid() == 0:
        return ""
    return "not root"


def mount_private_tmpfs(folders: Sequence[str], sizes: Optional[dict[str, int]] = None) -> str:
    """Moves this process into a mount namespace of its own (what it starts from now on inherits it, and it ends with
    the last of them: nothing to unmount or leak) and mounts an empty tmpfs over each folder. Returns "" when the
    folders are on tmpfs (mounted here, or already), else why they stay where they are: turned off, not root, a
    process with threads (a namespace is a thread's own, and a helper thread would see the disk's folders), or the
    kernel refused."""
    if _turned_off():
        return "turned off"
    if all(is_tmpfs(folder) for folder in folders):
        return ""
    if os.geteuid() != 0:
        return "not root"
    if len(os.listdir("/proc/self/task")) != 1:
        return "the process already has threads"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0:
        return f"unshare refused: {os.strerror(ctypes.get_errno())}"
    # Private from the root down, as `unshare --mount` makes it: no mount made here may reach the host's namespace.
    if libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        return f"making the mounts private was refused: {os.strerror(ctypes.get_errno())}"
    for folder in folders:
        size = (sizes or {}).get(folder)
        choices = (f"size={size}".encode(),) if size else MOUNT_OPTIONS
        if not any(libc.mount(b"krl-exchange", os.fsencode(folder), b"tmpfs", _MS_NOSUID | _MS_NODEV, options) == 0
                   for options in choices):
            return f"mounting a tmpfs on {folder} was refused: {os.strerror(ctypes.get_errno())}"
    return ""
