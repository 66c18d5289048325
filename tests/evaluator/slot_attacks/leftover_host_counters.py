# Attack class: leftovers through the host's own kernel state (red team, session 28). A fresh /proc still showed the
# host's cumulative memory counters: one task moved vmstat's unevictable_pgs_mlocked to a chosen value mod 4096 (mlock
# and munlock), and every later task on the host read it back. And memfd_secret's pages leave the kernel's direct map,
# splitting its huge pages until reboot. And the host's page cache (red team, session 29): a task evicted pages of a
# host file it may read (fadvise DONTNEED, madvise PAGEOUT), read some back, and a later task read which were resident,
# exactly, with preadv2's RWF_NOWAIT (512 bytes a task). This candidate is the probe: it fails loudly where any of these
# still works.
import ctypes
import errno
import mmap
import os
import platform
import sys

import torch.nn as nn

libc = ctypes.CDLL(None, use_errno=True)
reached = []
for path in ("/proc/vmstat", "/proc/zoneinfo"):
    try:
        with open(path) as handle:
            if handle.read(64):
                reached.append(path)
    except OSError:
        pass
if platform.machine() == "x86_64":
    fd = libc.syscall(447, 0)  # memfd_secret
    if fd >= 0:
        os.close(fd)
        reached.append("memfd_secret")
probed = sys.executable  # a host file every task may read
fd = os.open(probed, os.O_RDONLY)
try:
    try:
        os.posix_fadvise(fd, 0, 4096, os.POSIX_FADV_DONTNEED)
        reached.append("fadvise DONTNEED")
    except OSError:
        pass
    try:
        os.preadv(fd, [bytearray(16)], 0, os.RWF_NOWAIT)
        reached.append("preadv2 RWF_NOWAIT")
    except BlockingIOError:  # EAGAIN: answered, so the residency was readable
        reached.append("preadv2 RWF_NOWAIT")
    except OSError:
        pass
    mapping = mmap.mmap(fd, 4096, prot=mmap.PROT_READ)
    for advice in (20, 21):  # MADV_COLD, MADV_PAGEOUT
        try:
            mapping.madvise(advice)
            reached.append(f"madvise {advice}")
        except OSError:
            pass
    mapping.close()
finally:
    os.close(fd)
if platform.machine() == "x86_64":
    context = ctypes.c_ulong(0)
    if libc.syscall(206, 1, ctypes.byref(context)) == 0:  # io_setup: Linux AIO carries RWF_NOWAIT in memory
        reached.append("io_setup")
    own = libc.syscall(434, os.getpid(), 0)  # pidfd_open of itself, allowed
    if own >= 0 and (libc.syscall(440, own, None, 0, 21, 0) != -1 or ctypes.get_errno() != errno.EPERM):
        reached.append("process_madvise")  # madvise PAGEOUT on a pidfd, past madvise's own rule
    watch = libc.syscall(294, 0)  # inotify_init1: instances are counted per uid, shared by every slot's runners
    if watch >= 0:
        os.close(watch)
        reached.append("inotify_init1")
if reached:
    raise RuntimeError("the host's kernel state is within reach: " + ", ".join(reached))


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)
