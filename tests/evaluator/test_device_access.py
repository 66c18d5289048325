"""evaluator/isolation/device_access.py on this machine's kernel: a group refuses new opens of the listed character
devices while descriptors opened before the move keep working (v1's devices.deny here, and a v2 device program
where a cgroup2 hierarchy is mounted: /sys/fs/cgroup itself on v2 machines, /sys/fs/cgroup/unified on hybrid ones)."""

from __future__ import annotations

import os

import pytest

from evaluator.isolation import cgroups, device_access
from tests.evaluator.isolation_support import go, waiting_child

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="cgroups need root")

# /dev/null (1:3) stands in for a GPU's node: /dev/zero (1:5) is open before the move, /dev/null is opened after it.
OPENED_BEFORE = """
import os
before = os.open("/dev/zero", os.O_RDONLY)
print("open", flush=True)
input()
print(len(os.read(before, 4)), flush=True)
try:
    os.close(os.open("/dev/null", os.O_WRONLY))
    print("opened", flush=True)
except OSError as exc:
    print(exc.errno, flush=True)
"""


def run_moved(add) -> list[str]:
    """The child opens /dev/zero, is moved by `add(pid)`, then reads it and tries to open /dev/null."""
    child = waiting_child(OPENED_BEFORE)
    try:
        go(child)
        assert child.stdout.readline().strip() == "open"
        add(child.pid)
        child.stdin.write("\n")
        child.stdin.flush()
        return [child.stdout.readline().strip(), child.stdout.readline().strip()]
    finally:
        child.kill()
        child.wait()


def test_the_gpus_nodes_are_read_from_the_device_files(tmp_path):
    os.mknod(tmp_path / "nvidia0", 0o600 | 0o020000, os.makedev(195, 0))
    os.mknod(tmp_path / "nvidia1", 0o600 | 0o020000, os.makedev(195, 1))
    (tmp_path / "nvidia2-notes").write_text("")
    assert device_access.gpu_nodes([str(tmp_path / "nvidia[0-9]*")]) == [(195, 0), (195, 1)]


@pytest.mark.skipif(cgroups.detect_version() != "v1" or not os.path.isdir("/sys/fs/cgroup/devices"),
                    reason="a v1 devices hierarchy")
def test_a_v1_group_refuses_new_opens_and_keeps_old_descriptors():
    group = cgroups.TaskCgroup.create(f"test{os.getpid()}-devices")
    try:
        group.deny_device_opens([(1, 3)])
        assert run_moved(group.add) == ["4", "1"]  # read 4 bytes; EPERM
    finally:
        group.destroy()
    assert not os.path.exists(group.dirs["devices"])


V2_ROOTS = [root for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")
            if os.path.exists(os.path.join(root, "cgroup.controllers"))]


@pytest.mark.skipif(not V2_ROOTS, reason="no cgroup2 hierarchy mounted")
def test_a_v2_device_program_refuses_new_opens_and_keeps_old_descriptors():
    for nodes, expected in (([(1, 3), (195, 0)], ["4", "1"]), ([(1, 7), (195, 0)], ["4", "opened"])):  # listed; not
        folder = os.path.join(V2_ROOTS[0], f"krl-test{os.getpid()}-devices")
        os.mkdir(folder)
        try:
            device_access.deny_v2(folder, nodes)

            def add(pid: int) -> None:
                with open(os.path.join(folder, "cgroup.procs"), "w") as handle:
                    handle.write(str(pid))
            assert run_moved(add) == expected
        finally:
            os.rmdir(folder)


# The runner (excepted by its pid) opens /dev/null (1:3) after the move, and so does a thread of its; a child it starts
# then cannot: the device program reads the opener's thread group.
RUNNER_AND_CHILD = """
import os, subprocess, sys, threading
input()
def try_open():
    try:
        os.close(os.open("/dev/null", os.O_WRONLY))
        return "opened"
    except OSError as exc:
        return str(exc.errno)
found = []
thread = threading.Thread(target=lambda: found.append(try_open()))
thread.start(); thread.join()
child = subprocess.run([sys.executable, "-c", "import os; os.open('/dev/null', os.O_WRONLY)"], capture_output=True)
print(try_open(), found[0], "child", "opened" if child.returncode == 0 else "refused", flush=True)
"""


@pytest.mark.skipif(not V2_ROOTS, reason="no cgroup2 hierarchy mounted")
def test_a_v2_device_program_lets_the_runner_open_and_refuses_its_children():
    folder = os.path.join(V2_ROOTS[0], f"krl-test{os.getpid()}-runner")
    os.mkdir(folder)
    child = waiting_child(RUNNER_AND_CHILD)
    try:
        try:
            device_access.deny_v2(folder, [(1, 3)], except_pid=child.pid)
        except OSError as exc:  # a device program may read the opener's pid since Linux 6.10
            pytest.skip(f"this kernel refuses a device program that reads the opener's pid ({exc})")
        with open(os.path.join(folder, "cgroup.procs"), "w") as handle:
            handle.write(str(child.pid))
        go(child)
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().split() == ["opened", "opened", "child", "refused"]
    finally:
        child.kill()
        child.wait()
        os.rmdir(folder)


@pytest.mark.skipif(cgroups.detect_version() != "v1", reason="a v1 machine")
def test_v1_cannot_except_the_runner_and_says_so():
    group = cgroups.TaskCgroup.create(f"test{os.getpid()}-except")
    try:
        with pytest.raises(OSError, match="runner too"):
            group.deny_device_opens([(1, 3)], except_pid=os.getpid())
    finally:
        group.destroy()


def test_the_refusal_is_the_candidates_processes_on_a_gpu_by_default(monkeypatch):
    monkeypatch.delenv(device_access.DENY_ENV, raising=False)
    assert device_access.refusal_for("cpu") is None
    made = device_access.refusal_for("cuda:0")  # nothing where this process's pids are not the kernel's own
    assert (made is not None and made.except_runner) if device_access.pids_are_global() else made is None
    monkeypatch.setenv(device_access.DENY_ENV, "1")
    assert device_access.refusal_for("cuda:0").except_runner is False
    monkeypatch.setenv(device_access.DENY_ENV, "0")
    assert device_access.refusal_for("cuda:0") is None
