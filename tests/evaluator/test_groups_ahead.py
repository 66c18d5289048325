"""evaluator/slot/groups_ahead.py on this machine's real cgroups: the next task's group made in a thread while a task
runs holds its runner when the task takes it; a group made for another runner is torn down, with its process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from evaluator.isolation import cgroups
from evaluator.slot.groups_ahead import GroupsAhead
from tests.evaluator.pool_support import alive

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or bool(cgroups.available()),
                                reason="needs root and a writable cgroup hierarchy")


def sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


def test_a_group_made_ahead_holds_its_runner_when_the_task_takes_it():
    runner, ahead = sleeper(), GroupsAhead()
    try:
        ahead.prepare("r1", runner.pid, 512 * 2**20, runner_namespaces=False)
        ahead.prepare("r1", runner.pid, 512 * 2**20, runner_namespaces=False)  # asked again: still the one group
        task = ahead.take("r1", runner.pid)
        assert task is not None and task.cgroup is not None and ahead.pending is None
        assert task.cgroup.pids() == [runner.pid] and task.cgroup.memory_limit == int(512 * 2**20 * 1.25)
        assert task.setup_s < 1.0  # what the task waited for: the join, not the move
        report = task.end()
        assert not alive(runner.pid) and report is not None
    finally:
        runner.kill()
        runner.wait()


def test_a_group_made_for_another_runner_is_torn_down_with_it():
    spare, other = sleeper(), sleeper()
    ahead = GroupsAhead()
    try:
        ahead.prepare("r1", spare.pid, None, runner_namespaces=False)
        _, _, thread, made = ahead.pending
        thread.join()
        folders = list(made["task"].cgroup.dirs.values())
        assert folders and all(os.path.isdir(folder) for folder in folders)
        assert ahead.take("r2", other.pid) is None  # the spare was lost, another runner got the task
        spare.wait(timeout=30)  # killed with its group, which is gone
        assert not any(os.path.isdir(folder) for folder in folders) and alive(other.pid)
        ahead.prepare("r3", other.pid, None, runner_namespaces=False)
        ahead.drop()  # the judge's exit
        other.wait(timeout=30)
        assert ahead.pending is None
    finally:
        for process in (spare, other):
            process.kill()
            process.wait()
