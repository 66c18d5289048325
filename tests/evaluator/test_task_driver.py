"""The judge's clock around a runner's order (slot/task_driver.py), with a real child process answering over real pipes:
the candidate's work is inside the clock even when the judge is held up right after waking its runner, and an answer
polled for (slot/answer_spin.py) is found without a wake-up."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types

import pytest

from evaluator.slot import answer_spin, task_driver
from evaluator.slot.judge_host import _Reader, _Runner

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
    write_message(int(sys.argv[2]), {{"type": "ran", "name": str(message.get("spin_ms"))}})
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
    runner = _Runner("r1", order_w, answer_r, _Reader(answer_r), time.monotonic())
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


def test_a_polled_answer_is_found_without_sleeping_and_asks_the_runner_to_poll_too(driver, monkeypatch):
    """Spinning, the judge finds the answer by polling (never waits in select) and each order carries spin_ms, so the
    runner polls for the next one; the work stays inside the clock."""
    def no_sleep(*_args, **_kwargs):
        raise AssertionError("the judge slept in select while it should poll")

    monkeypatch.setattr(driver, "_wait", no_sleep)
    with driver.spinning(WORK_S * 10):
        answer = driver.order({"type": "run"}, "ran")
    assert answer["name"] == str(answer_spin.RUNNER_SPIN_MS)
    assert WORK_S <= driver.answered_at - driver.sent_at < WORK_S + 0.5
    assert driver.spin_s == 0.0  # restored after the block


def test_an_answer_later_than_the_poll_is_waited_for_as_before(driver, monkeypatch):
    """An order longer than the polling falls back to sleeping in select, and the clock still holds the work."""
    waits = []
    real_wait = driver._wait
    monkeypatch.setattr(driver, "_wait", lambda deadline, want_room=False: waits.append(1) or real_wait(deadline,
                                                                                                      want_room))
    with driver.spinning(WORK_S / 10):
        answer = driver.order({"type": "run"}, "ran")
    assert waits and answer["name"] == str(answer_spin.RUNNER_SPIN_MS)
    assert driver.answered_at - driver.sent_at >= WORK_S
    assert driver.order({"type": "run"}, "ran")["name"] == "None"  # not spinning: the runner is not asked to poll


def test_poll_readable_sees_data_at_once_and_gives_up_after_its_time():
    read_end, write_end = os.pipe()
    try:
        start = time.perf_counter()
        assert not answer_spin.poll_readable(read_end, 0.02)
        assert time.perf_counter() - start >= 0.02
        os.write(write_end, b"x")
        assert answer_spin.poll_readable(read_end, 5.0)
    finally:
        os.close(read_end)
        os.close(write_end)


def test_the_judges_poll_is_bounded_and_zero_turns_it_off(monkeypatch):
    monkeypatch.delenv(answer_spin.SPIN_ENV, raising=False)
    assert answer_spin.judge_spin_seconds() == answer_spin.SPIN_DEFAULT_MS / 1e3
    for value, seconds in (("0", 0.0), ("5000", answer_spin.SPIN_MAX_MS / 1e3), ("-3", 0.0),
                           ("soon", answer_spin.SPIN_DEFAULT_MS / 1e3)):
        monkeypatch.setenv(answer_spin.SPIN_ENV, value)
        assert answer_spin.judge_spin_seconds() == seconds


def test_the_runner_polls_after_an_order_that_asks_it_to_and_only_then():
    """serve_orders (the runner's end) polls for the next order after answering one with spin_ms, for at most
    RUNNER_SPIN_MS whatever the order says."""
    from evaluator.slot.order_loop import Exchange, serve_orders

    orders = iter([{"type": "keep", "calls": {}, "spin_ms": 500}, {"type": "keep", "calls": {}}, None])
    answers, polls = [], []
    session = types.SimpleNamespace(keep=lambda calls: None)
    serve_orders(lambda: next(orders), answers.append, session, Exchange("", ""), await_order=polls.append)
    assert answers == [{"type": "kept"}, {"type": "kept"}]
    assert polls == [answer_spin.RUNNER_SPIN_MS / 1e3]
