"""The timed pair's CPU priority: while a task holds its GPU, the judge's threads and the runner's run at nice -10,
and both are put back after (real processes; lowering a nice value needs root, as the evaluator's host has)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from evaluator.isolation.timing_priority import BOOSTED_NICE, TimingPriority


def _nice(pid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, pid)


@pytest.fixture
def runner():
    child = subprocess.Popen([sys.executable, "-c", "import threading, time; "
                              "threading.Thread(target=time.sleep, args=(30,)).start(); time.sleep(30)"])
    yield child
    child.kill()
    child.wait()


def test_the_judge_and_the_runner_are_boosted_while_timing_and_put_back_after(runner):
    if os.geteuid() != 0:
        pytest.skip("lowering a nice value needs root")
    own_before = _nice(0)
    with TimingPriority(runner.pid):
        assert _nice(0) == BOOSTED_NICE
        threads = os.listdir(f"/proc/{runner.pid}/task")
        assert all(_nice(int(tid)) == BOOSTED_NICE for tid in threads)
    assert _nice(0) == own_before
    assert all(_nice(int(tid)) == 0 for tid in os.listdir(f"/proc/{runner.pid}/task"))


def test_a_runner_already_gone_only_boosts_the_judge():
    own_before = _nice(0)
    with TimingPriority(2**22 + 12345):  # no such process
        pass
    assert _nice(0) == own_before


def test_asked_to_the_judge_and_every_runner_thread_share_one_cpu_and_get_theirs_back_after(runner, monkeypatch):
    """KRL_WORKER_TIMING_SAME_CPU=1: the judge's thread and every thread of the runner on one CPU while the device is held,
    each given its former affinity back after."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: nothing to pin")
    monkeypatch.setenv("KRL_WORKER_TIMING_SAME_CPU", "1")
    judge_before = os.sched_getaffinity(0)
    runner_before = {int(tid): os.sched_getaffinity(int(tid)) for tid in os.listdir(f"/proc/{runner.pid}/task")}
    with TimingPriority(runner.pid) as held:
        assert held.cpu is not None
        assert os.sched_getaffinity(0) == {held.cpu}
        assert all(os.sched_getaffinity(tid) == {held.cpu} for tid in runner_before)
    assert os.sched_getaffinity(0) == judge_before
    assert all(os.sched_getaffinity(tid) == runner_before[tid] for tid in runner_before)


def test_by_default_the_pair_stays_where_it_is(runner, monkeypatch):
    monkeypatch.delenv("KRL_WORKER_TIMING_SAME_CPU", raising=False)
    before = os.sched_getaffinity(runner.pid)
    with TimingPriority(runner.pid) as held:
        assert held.cpu is None and os.sched_getaffinity(runner.pid) == before
