"""Resource limits a worker or runner applies to itself before it imports anything heavy, and the
die-with-parent request: the process plumbing every evaluator process shares."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Any, Optional


@dataclass
class Limits:
    """Resource limits applied by each worker to itself before it imports anything heavy."""

    address_space_bytes: Optional[int] = None  # CPU mode only: CUDA reserves huge virtual ranges
    # Resident memory of a worker's whole process tree while it runs a task, checked by the pool (GPU mode has no
    # address-space limit, so this is what stops a candidate from exhausting the host).
    resident_bytes: Optional[int] = None
    file_size_bytes: int = 64 * 2**20  # also caps a stdout/stderr flood (files, truncated per task)
    open_files: int = 4096
    core_dump_bytes: int = 0
    # Processes and threads of the sandbox user (uid 65534, shared by every slot's candidates): bounds a fork bomb
    # below the host's pid_max. Applied only inside a sandbox that runs as that user (see apply_limits).
    sandbox_user_processes: int = 16384


TRUSTED_LIMIT_KEYS = ("core_dump_bytes", "open_files")


def process_cap(wanted: Optional[int]) -> Optional[int]:
    """At most half the host's pid_max, so a fork bomb in the sandbox leaves the host room to act."""
    try:
        with open("/proc/sys/kernel/pid_max") as handle:
            pid_max = int(handle.read())
    except (OSError, ValueError):
        return wanted
    return None if wanted is None else min(wanted, pid_max // 2)


def apply_limits(limits: dict[str, Any]) -> None:
    """Cap this process (and what it starts) by `limits` (a Limits as a dict): cores, files, output size, address
    space, and inside a sandbox the sandbox user's process count."""
    import resource

    def cap(which: int, value: Optional[int]) -> None:
        if value is None:
            return
        soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, hard))

    cap(resource.RLIMIT_CORE, limits.get("core_dump_bytes"))
    cap(resource.RLIMIT_NOFILE, limits.get("open_files"))
    cap(resource.RLIMIT_FSIZE, limits.get("file_size_bytes"))
    if limits.get("file_size_hard_bytes"):
        # A soft cap (what a flood of output hits) under a hard one that a trusted write may lift the soft cap to.
        soft = limits.get("file_size_bytes") or limits["file_size_hard_bytes"]
        resource.setrlimit(resource.RLIMIT_FSIZE, (min(soft, limits["file_size_hard_bytes"]),
                                                   limits["file_size_hard_bytes"]))
    cap(resource.RLIMIT_AS, limits.get("address_space_bytes"))
    from evaluator.isolation.sandbox import NOBODY_UID

    if os.environ.get("KRL_IN_SANDBOX") and os.getuid() == NOBODY_UID:  # never the user's own (or root's) count
        cap(resource.RLIMIT_NPROC, process_cap(limits.get("sandbox_user_processes")))
    # Past the size cap a write fails with EFBIG instead of the signal killing the worker.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (prctl PR_SET_PDEATHSIG); best effort."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass
