"""evaluator/isolation/teardown.py: the root wipe removes mode-0000 folders and never follows links; the task
teardown kills a group (escaped processes included) or, without one, the process tree; nothing hangs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from evaluator.isolation import cgroups
from evaluator.isolation.teardown import teardown_task, wipe_folder
from evaluator.slot import task_isolation
from tests.evaluator.isolation_support import go, waiting_child

needs_cgroups = pytest.mark.skipif(os.geteuid() != 0 or bool(cgroups.available()),
                                   reason="needs root and a writable cgroup hierarchy")


def test_wipe_removes_mode_0000_folders_and_keeps_link_targets(tmp_path):
    folder, outside = tmp_path / "task", tmp_path / "outside.txt"
    outside.write_text("keep me")
    deep = folder / "planted" / "inner"
    deep.mkdir(parents=True)
    (deep / "file").write_text("x")
    os.chmod(deep, 0)
    os.chmod(folder / "planted", 0)
    (folder / "link").symlink_to(outside)
    (folder / "dirlink").symlink_to(tmp_path)
    assert wipe_folder(str(folder)) == []
    assert os.listdir(folder) == []
    assert outside.read_text() == "keep me"


def test_teardown_without_a_cgroup_kills_the_tree():
    child = subprocess.Popen([sys.executable, "-c", "import os, time\nos.fork()\ntime.sleep(600)"])
    try:
        report = teardown_task(None, child.pid)
        assert report.killed >= 1
        assert child.wait(timeout=60) == -9
    finally:
        child.kill()
        child.wait()


@needs_cgroups
def test_task_isolation_begin_and_end_around_a_runner():
    child = waiting_child("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(600)\n"
                          "t = time.process_time()\nwhile time.process_time() - t < 0.2:\n    pass\n"
                          "print('done', flush=True)\ntime.sleep(600)")
    task = task_isolation.begin_task("r-test", child.pid, memory_limit=512 * 2**20, runner_namespaces=True)
    try:
        assert task.cgroup is not None
        assert task.runner_view("/a/b") == f"/proc/{child.pid}/root/a/b"
        go(child)
        assert child.stdout.readline().strip() == "done"
        assert task_isolation.task_cpu_time_ns(task) >= 0.15e9
        members = task.cgroup.pids()
        assert len(members) == 2  # the runner and its child in a session of its own
        report = task_isolation.end_task(task)
        assert report.clean and report.killed == 2
        assert child.wait(timeout=60) == -9
        assert not any(os.path.exists(f"/proc/{pid}/stat") and open(f"/proc/{pid}/stat").read().split()[2] != "Z"
                       for pid in members)
    finally:
        child.kill()
        child.wait()
        task.end()


def test_cpu_time_falls_back_to_the_process_tree():
    child = waiting_child("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2:\n    pass\n"
                          "print('done', flush=True)\ntime.sleep(600)")
    try:
        go(child)
        assert child.stdout.readline().strip() == "done"
        task = task_isolation.TaskIsolation("no-group", child.pid)
        assert task_isolation.task_cpu_time_ns(task) >= 0.15e9
    finally:
        child.kill()
        child.wait()
