"""evaluator/isolation/pid_filter.py: loaded in a real child process, it refuses signals, scheduling, priority,
limits and affinity aimed at any other process (the parent standing in for the zygote), and allows them on itself."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import platform
import subprocess
import sys

import pytest

from evaluator.isolation import pid_filter

pytestmark = pytest.mark.skipif(pid_filter.filter_program(1) is None, reason="an architecture the filter lacks")

PROBE = """
import json, os, resource, signal, threading
from evaluator.isolation import pid_filter
parent = os.getppid()
pid_filter.install()
calls = {
    "kill parent": lambda: os.kill(parent, 0),
    "kill every process": lambda: os.kill(-1, 0),
    "idle parent": lambda: os.sched_setscheduler(parent, os.SCHED_IDLE, os.sched_param(0)),
    "nice parent": lambda: os.setpriority(os.PRIO_PROCESS, parent, 19),
    "nice whole user": lambda: os.setpriority(os.PRIO_USER, 0, 19),
    "affinity parent": lambda: os.sched_setaffinity(parent, {0}),
    "limit parent": lambda: resource.prlimit(parent, resource.RLIMIT_NOFILE),
    "pidfd parent": lambda: os.pidfd_open(parent),
    "join another group": lambda: os.setpgid(0, parent),
    "kill self": lambda: os.kill(os.getpid(), 0),
    "kill own group": lambda: os.kill(0, 0),
    "idle self": lambda: os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0)),
    "nice self": lambda: os.setpriority(os.PRIO_PROCESS, 0, 1),
    "limit self": lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)),
    "raise": lambda: signal.pthread_kill(threading.get_ident(), 0),
}
out = {}
for name, call in calls.items():
    try:
        call()
        out[name] = "ok"
    except OSError as exc:
        out[name] = exc.errno
print(json.dumps(out))
"""


def test_only_the_process_itself_can_be_reached():
    process = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120,
                             start_new_session=True)  # kill(0) then reaches the child's own group only
    assert process.returncode == 0, process.stderr
    result = json.loads(process.stdout)
    refused = {name for name, outcome in result.items() if outcome == 1}  # EPERM
    assert refused == {"kill parent", "kill every process", "idle parent", "nice parent", "nice whole user",
                       "affinity parent", "limit parent", "pidfd parent", "join another group"}, result


def test_unknown_architecture_gives_no_program():
    assert pid_filter.filter_program(1234, machine="sparc64") is None
    assert len(pid_filter.filter_program(1234, machine=platform.machine())) % 8 == 0


def test_syscall_numbers_agree_with_libseccomp():
    name = ctypes.util.find_library("seccomp")
    if not name or platform.machine() not in pid_filter.NUMBERS:
        pytest.skip("no libseccomp to compare with")
    lib = ctypes.CDLL(name)
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    _arch, numbers = pid_filter.NUMBERS[platform.machine()]
    assert {call: lib.seccomp_syscall_resolve_name(call.encode()) for call in numbers} == numbers
