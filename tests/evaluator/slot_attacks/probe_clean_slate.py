# Not an attack: an honest candidate that looks for what the slot attacks leave behind (planted folders, the SysV
# segment, an idle scheduling class or a niced autogroup, an escaped process, flood files, stdout and stderr it cannot
# print to, TCP sockets of an earlier task) and fails loudly if any is there.
import ctypes
import os
import sys

import torch.nn as nn

found = []
for base in {os.environ.get("HOME", ""), os.environ.get("TMPDIR", ""), "/tmp", "/dev/shm", os.getcwd()}:
    if base and os.path.isdir(base):
        found += [os.path.join(base, n) for n in os.listdir(base) if n.startswith(("krl-planted", "krl-flood"))]
if ctypes.CDLL(None, use_errno=True).shmget(0x4B524C31, 0, 0) >= 0:
    found.append("SysV segment 0x4B524C31")
for pid in (0, os.getppid()):
    if os.sched_getscheduler(pid) != os.SCHED_OTHER:
        found.append(f"scheduling class {os.sched_getscheduler(pid)} on pid {pid or os.getpid()}")
with open("/proc/self/autogroup") as handle:
    autogroup = handle.read().strip()
if not autogroup.endswith("nice 0"):
    found.append(f"autogroup {autogroup!r}")
try:
    print("probe: a line on stdout", flush=True)
    print("probe: a line on stderr", file=sys.stderr, flush=True)
except OSError as exc:
    found.append(f"stdout or stderr unwritable ({exc})")
for entry in os.listdir("/proc"):
    try:
        with open(f"/proc/{entry}/comm") as handle:
            if handle.read().strip() == "krl-escaped":
                found.append(f"escaped process {entry}")
    except OSError:
        pass
for table in ("/proc/net/tcp", "/proc/net/tcp6"):  # a network namespace of this runner's own lists none
    try:
        with open(table) as handle:
            found += [f"socket {line.split()[1]} ({table})" for line in handle.read().splitlines()[1:]]
    except OSError:
        pass
if found:
    raise RuntimeError("left behind by an earlier task: " + "; ".join(found))


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)
