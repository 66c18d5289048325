"""evaluator/isolation/pid_filter.py: loaded in a real child process, it refuses signals and limits aimed at any other
process (the parent standing in for the zygote), answers scheduling, priority and affinity hints aimed at one as done
without touching it, and allows all of them on itself; its threads reach themselves through 0."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
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
def state(pid):
    return [os.sched_getscheduler(pid), os.getpriority(os.PRIO_PROCESS, pid), sorted(os.sched_getaffinity(pid))]
parent_before = state(parent)
out = {}
for name, call in calls.items():
    try:
        call()
        out[name] = "ok"
    except OSError as exc:
        out[name] = exc.errno
out["parent untouched"] = state(parent) == parent_before
print(json.dumps(out))
"""

# A thread of the filtered process: glibc's pthread_setaffinity_np names the thread's own id, which the filter cannot
# tell from another process's; 0 is the calling thread.
THREADS = """
import json, os, threading
from evaluator.isolation import pid_filter
pid_filter.install()
cpus = sorted(os.sched_getaffinity(0))
out = {}
def worker():
    tid = threading.get_native_id()
    for name, call in {"affinity own thread by id": lambda: os.sched_setaffinity(tid, {cpus[0]}),
                       "nice own thread by id": lambda: os.setpriority(os.PRIO_PROCESS, tid, 2)}.items():
        try:
            call()
            out[name] = "ok"
        except OSError as exc:
            out[name] = exc.errno
    out["by id took effect"] = sorted(os.sched_getaffinity(0)) != cpus or os.getpriority(os.PRIO_PROCESS, 0) == 2
    os.sched_setaffinity(0, {cpus[-1]})
    os.setpriority(os.PRIO_PROCESS, 0, 3)
    out["by 0 took effect"] = os.sched_getaffinity(0) == {cpus[-1]} and os.getpriority(os.PRIO_PROCESS, 0) == 3
thread = threading.Thread(target=worker)
thread.start()
thread.join()
out["main thread untouched"] = sorted(os.sched_getaffinity(os.getpid())) == cpus
out["cpus"] = len(cpus)
print(json.dumps(out))
"""


def test_only_the_process_itself_can_be_reached():
    process = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120,
                             start_new_session=True)  # kill(0) then reaches the child's own group only
    assert process.returncode == 0, process.stderr
    result = json.loads(process.stdout)
    refused = {name for name, outcome in result.items() if type(outcome) is int and outcome == 1}  # EPERM
    assert refused == {"kill parent", "kill every process", "nice whole user", "limit parent", "pidfd parent",
                       "join another group"}, result
    # Scheduling hints aimed at the parent are answered as done (pid_filter.NO_EFFECT) and do nothing.
    assert result["idle parent"] == result["nice parent"] == result["affinity parent"] == "ok", result
    assert result["parent untouched"] is True, result


def test_a_thread_reaches_itself_through_0_and_a_hint_by_its_id_does_nothing():
    process = subprocess.run([sys.executable, "-c", THREADS], capture_output=True, text=True, timeout=120)
    assert process.returncode == 0, process.stderr
    result = json.loads(process.stdout)
    assert result["affinity own thread by id"] == result["nice own thread by id"] == "ok", result  # no EPERM
    assert result["by id took effect"] is False and result["by 0 took effect"] is True, result
    assert result["main thread untouched"] is True, result


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


def test_openmp_threads_bound_by_libgomp_start_under_the_filter():
    """OMP_* passes the sandbox's environment allow-list; with OMP_PROC_BIND set, libgomp pins each new thread by its
    id and, refused (EPERM, before NO_EFFECT), aborted the process: "libgomp: Thread creation failed"."""
    probe = ("import torch\nfrom evaluator.isolation import pid_filter\npid_filter.install()\n"
             "torch.set_num_threads(2)\na = torch.randn(256, 256)\nprint(float((a @ a).abs().sum()) > 0)\n")
    env = {**os.environ, "OMP_PROC_BIND": "true", "OMP_PLACES": "cores"}
    process = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
    assert process.returncode == 0 and process.stdout.strip() == "True", process.stderr[-2000:]
