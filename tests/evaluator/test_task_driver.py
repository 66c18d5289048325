"""The judge's clock around a runner's order (slot/task_driver.py), with a real child process answering over real pipes:
the candidate's work is inside the clock even when the judge is held up right after waking its runner."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types

import pytest

from evaluator.slot import task_driver
from evaluator.slot.runner_slot import MessageReader, RunnerHandle

# A runner that works WORK_S on each order, then answers "ran" (the framing of evaluator/contract/framing.py).
ANSWERING = """
import os, sys, time
sys.path.insert(0, {root!r})
from evaluator.contract.framing import read_message, write_message
while True:
    message = read_message(int(sys.argv[1]))
    if message is None:
        break
    time.sleep({work_s})
    write_message(int(sys.argv[2]), {{"type": "ran"}})
"""
WORK_S = 0.05
STALL_S = 0.2  # longer than the runner's work: its answer is waiting when the judge comes back


@pytest.fixture()
def driver():
    order_r, order_w = os.pipe()
    answer_r, answer_w = os.pipe()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    child = subprocess.Popen([sys.executable, "-c", ANSWERING.format(root=root, work_s=WORK_S), str(order_r),
                              str(answer_w)], pass_fds=(order_r, answer_w))
    os.close(order_r)
    os.close(answer_w)
    os.set_blocking(answer_r, False)
    runner = RunnerHandle("r1", order_w, answer_r, MessageReader(answer_r), time.monotonic())
    made = task_driver.TaskDriver(types.SimpleNamespace(control=None), runner, time.monotonic() + 30)
    made.order({"type": "warm"}, "ran")  # the child's imports done before anything is timed
    yield made
    made.close()
    runner.close()
    child.wait(10)


def test_the_candidates_work_is_timed_when_the_judge_stalls_right_after_waking_it(driver, monkeypatch):
    """The runner wakes on the order's write and may run on the judge's own CPU before the judge reads its clock again.
    Read after the write, the clock started once the work was done (identical code read 20-112x on an H100)."""
    real_write = os.write

    def write_then_stall(fd, data):
        written = real_write(fd, data)
        if fd == driver.runner.task_w:
            time.sleep(STALL_S)  # the judge preempted by the runner it just woke
        return written

    monkeypatch.setattr(os, "write", write_then_stall)
    driver.order({"type": "run"}, "ran")
    assert driver.answered_at - driver.sent_at >= WORK_S


def test_without_a_stall_the_clock_holds_the_work_and_little_more(driver):
    """Without a stall the clock holds the runner's work and little more (the pipe both ways)."""
    driver.order({"type": "run"}, "ran")
    assert WORK_S <= driver.answered_at - driver.sent_at < WORK_S + 0.5
