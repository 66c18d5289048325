"""The GPU's device lock between real processes: shared steps together, a timing alone, writer preference, a bounded
drain, one process nesting both kinds without waiting on itself; the judge's hooks, inert without a lock (CPU); a
timing's hold, one window at a time."""

from __future__ import annotations

import fcntl
import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from evaluator.isolation.device_lock import LOCK_DIR_ENV, DeviceLock
from evaluator.slot.outcome import TaskEnded
from evaluator.slot.task_driver import Deadline
from evaluator.slot.task_judge import SHARED_STEPS, shared_device, shared_steps_from

ROOT = str(Path(__file__).resolve().parents[2])
ANSWER_WAIT_S = 60.0  # generous: a loaded 2-core machine
SHORT_S = 0.3  # a wait that must fail: it fails at its deadline whatever the machine's load
LONG_S = 60.0  # a wait that must succeed


class Holder:
    """One process with a DeviceLock of its own, driven a command at a time."""

    def __init__(self, lock_dir: str):
        env = {**os.environ, LOCK_DIR_ENV: lock_dir, "PYTHONPATH": ROOT}
        self.process = subprocess.Popen([sys.executable, "-m", "tests.evaluator.lock_holder", "gpu-test"], cwd=ROOT,
                                        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def send(self, *command) -> None:
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def reply(self):
        ready, _, _ = select.select([self.process.stdout], [], [], ANSWER_WAIT_S)
        assert ready, "the holder did not answer"
        return json.loads(self.process.stdout.readline())

    def ask(self, *command):
        self.send(*command)
        return self.reply()

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture
def lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path))
    return str(tmp_path)


@pytest.fixture
def holders(lock_dir):
    started = [Holder(lock_dir) for _ in range(3)]
    yield started
    for holder in started:
        holder.close()


def gate_taken(lock_dir: str) -> bool:
    """Whether a timing holds (or waits at) the gate: a shared probe of the gate file is refused."""
    fd = os.open(DeviceLock("gpu-test").gate_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def wait_for(condition, what: str) -> None:
    """Until `condition()` holds (a state observed, not a time slept), at most ANSWER_WAIT_S."""
    until = time.monotonic() + ANSWER_WAIT_S
    while not condition():
        assert time.monotonic() < until, what
        time.sleep(0.01)


def test_shared_holders_share_and_a_timing_has_the_device_alone(holders):
    a, b, c = holders
    assert all(holder.ask("shared", LONG_S) is not None for holder in holders)  # three at once
    assert c.ask("release_shared") is None
    waited, _ = c.ask("exclusive", SHORT_S, LONG_S)  # a and b do not leave: it waits up to its deadline
    assert waited is None
    a.ask("release_shared")
    b.ask("release_shared")
    waited, overran = c.ask("exclusive", LONG_S, LONG_S)
    assert waited is not None and not overran
    assert a.ask("shared", SHORT_S) is None  # the timing excludes shared steps
    assert b.ask("exclusive", SHORT_S, LONG_S)[0] is None  # and other timings
    c.ask("release")
    assert a.ask("shared", LONG_S) is not None


def test_a_waiting_timing_holds_off_new_shared_holders(holders, lock_dir):
    a, b, c = holders
    assert a.ask("shared", LONG_S) is not None
    c.send("exclusive", LONG_S, LONG_S)  # waits for a to leave
    wait_for(lambda: gate_taken(lock_dir), "the timing never reached the gate")
    assert b.ask("shared", SHORT_S) is None  # writer preference: no new shared holder while a timing waits
    a.ask("release_shared")
    waited, overran = c.reply()
    assert waited is not None and not overran
    assert b.ask("shared", SHORT_S) is None
    c.ask("release")
    assert b.ask("shared", LONG_S) is not None


def test_a_timing_waits_a_bounded_time_for_shared_holders_that_do_not_leave(holders):
    a, b, c = holders
    assert a.ask("shared", LONG_S) is not None  # a hostile candidate's order, spinning
    waited, overran = c.ask("exclusive", LONG_S, 0.2)
    assert waited is not None and overran  # timed anyway, beside it, and says so
    assert b.ask("shared", SHORT_S) is None  # still no new shared step
    assert b.ask("exclusive", SHORT_S, LONG_S)[0] is None  # nor another timing
    c.ask("release")
    assert b.ask("shared", LONG_S) is not None


def test_one_process_nests_both_kinds_without_waiting_on_itself(holders, lock_dir):
    other = holders[0]
    lock = DeviceLock("gpu-test")
    try:
        assert lock.acquire_shared(time.monotonic() + LONG_S) is not None
        assert lock.acquire(time.monotonic() + LONG_S) is not None and not lock.overran  # its own share gave way
        assert other.ask("shared", SHORT_S) is None
        assert lock.acquire_shared(time.monotonic() - 1) == 0.0  # inside its own exclusive hold: nothing to wait for
        lock.release_shared()
        lock.release()  # back to the share it held
        assert other.ask("exclusive", SHORT_S, LONG_S)[0] is None
        assert other.ask("shared", LONG_S) is not None
        other.ask("release_shared")
        lock.release_shared()
        assert other.ask("exclusive", LONG_S, LONG_S)[0] is not None
        other.ask("release")
    finally:
        lock.close()


def test_the_judges_hooks_do_nothing_without_a_lock_and_end_a_task_that_cannot_get_the_device(holders, lock_dir):
    ran, phases = [], {}
    with shared_device(None, time.monotonic() - 1, phases):  # CPU mode: no lock, no wait, nothing recorded
        ran.append("cpu")
    assert ran == ["cpu"] and phases == {}
    timing = holders[0]
    lock = DeviceLock("gpu-test")
    try:
        assert timing.ask("exclusive", LONG_S, LONG_S)[0] is not None
        with pytest.raises(Deadline):  # a started task ends as timeout, not as an infrastructure failure
            with shared_device(lock, time.monotonic() + SHORT_S, phases):
                ran.append("never")
        assert phases == {}  # a wait that failed records nothing
        timing.ask("release")
        with shared_device(lock, time.monotonic() + LONG_S, phases, "trials"):
            assert lock.shared_depth == 1
            ran.append("gpu")
        assert ran == ["cpu", "gpu"] and lock.shared_depth == 0
        assert phases["device_shared_wait"] >= 0 and phases["device_shared_hold"] >= 0
        assert phases["shared_hold_trials"] == phases["device_shared_hold"]  # by step too: what a drain waits for
    finally:
        lock.close()


def test_a_timing_records_how_long_the_shared_steps_took_to_drain(holders, lock_dir):
    shared, lock = holders[0], DeviceLock("gpu-test")
    try:
        assert shared.ask("shared", LONG_S) is not None
        releasing = threading.Timer(0.3, lambda: shared.ask("release_shared"))
        releasing.start()
        assert lock.acquire(time.monotonic() + LONG_S) is not None and not lock.overran
        releasing.join()
        assert 0.1 <= lock.drained_s < ANSWER_WAIT_S
        lock.release()
        assert lock.acquire(time.monotonic() + LONG_S) is not None and lock.drained_s < 0.1  # nothing to drain
        lock.release()
    finally:
        lock.close()


def timing_phase_with(lock: DeviceLock):
    """A judge's TimingPhase reduced to what the hold reads: its task's device, a driver's deadline (no runner: pid 0,
    the judge alone boosted) and a schedule's phases."""
    from types import SimpleNamespace

    from evaluator.slot.timing_phase import TimingPhase

    driver = SimpleNamespace(deadline=time.monotonic() + LONG_S, runner=SimpleNamespace(host_pid=0))
    return TimingPhase(SimpleNamespace(device="cuda:0"), driver, SimpleNamespace(phases={}), lock=lock)


def test_a_timing_holds_the_device_one_window_at_a_time(holders, lock_dir):
    """Another slot's timing gets the device between two of this one's windows (its rounds), never inside one."""
    other, lock = holders[0], DeviceLock("gpu-test")
    phase = timing_phase_with(lock)
    driver = phase.driver
    try:
        with phase.held():
            assert other.ask("exclusive", SHORT_S, SHORT_S)[0] is None
        assert other.ask("exclusive", LONG_S, LONG_S)[0] is not None
        driver.deadline = time.monotonic() + SHORT_S
        with pytest.raises(TaskEnded):  # not had within the task's limit: the task ends (timeout)
            with phase.held():
                pass
        other.ask("release")
        driver.deadline = time.monotonic() + LONG_S
        with phase.held():
            pass
        phases = phase.schedule.phases
        assert phases["timing_held"] > 0 and phases["device_wait"] >= 0 and phases["device_shared_overrun"] == 0
    finally:
        lock.close()


def test_a_measurement_can_pick_the_shared_steps():
    assert shared_steps_from("1") == shared_steps_from("") == SHARED_STEPS  # the default: timings beside hogs hold
    assert shared_steps_from("0") == frozenset()
    assert shared_steps_from("trials, recheck,no_such_step") == {"trials", "recheck"}


def test_a_window_had_as_another_slot_lets_go_settles_first(holders, lock_dir, monkeypatch):
    """A window had after a wait lets the settle pass before its timed work (the slot before starts its next GPU work
    at once); a window had at once does not wait."""
    from evaluator.slot.exclusive_hold import SETTLE_ENV

    monkeypatch.setenv(SETTLE_ENV, "20")
    other, lock = holders[0], DeviceLock("gpu-test")
    phase = timing_phase_with(lock)
    phases = phase.schedule.phases
    try:
        with phase.held():
            pass
        assert "held_settle" not in phases  # had at once
        assert other.ask("exclusive", LONG_S, LONG_S)[0] is not None
        letting_go = threading.Timer(0.2, lambda: other.ask("release"))
        letting_go.start()
        began = time.perf_counter()
        with phase.held():
            inside = time.perf_counter()
        letting_go.join()
        assert phases["held_settle"] == 0.02 and phases["device_wait"] >= 0.1
        assert inside - began >= phases["device_wait"] + 0.02 - 1e-3  # the settle came after the wait, inside the hold
    finally:
        lock.close()


def test_rounds_held_together_are_one_window(holders, lock_dir, monkeypatch):
    """By default a task's counted rounds take the device once: the windows inside book nothing more, and no other
    timing gets in between them."""
    from evaluator.slot.exclusive_hold import TOGETHER_ENV

    other, lock = holders[0], DeviceLock("gpu-test")
    phase = timing_phase_with(lock)
    try:
        monkeypatch.setenv(TOGETHER_ENV, "0")
        with phase.held_together("rounds"):  # the setting off: nothing held until a window
            assert other.ask("exclusive", LONG_S, LONG_S)[0] is not None
            other.ask("release")
        monkeypatch.delenv(TOGETHER_ENV)  # the default
        with phase.held_together("rounds"):
            for _ in range(3):
                with phase.held():
                    pass
                assert other.ask("exclusive", SHORT_S, SHORT_S)[0] is None  # between two rounds: still held
        assert lock.exclusive_depth == 0
        assert other.ask("exclusive", LONG_S, LONG_S)[0] is not None
        other.ask("release")
        phases = phase.schedule.phases
        assert phases["device_windows"] == 1 and phases["held_rounds"] == phases["timing_held"] > 0
    finally:
        lock.close()


def test_rounds_are_not_held_together_beside_a_shared_step_that_overran_its_drain(holders, lock_dir):
    """A hog's long shared step still on the device past the drain's bound: the rounds then take a window each, each
    waiting for a drain of its own, rather than all running beside it."""
    hog, lock = holders[0], DeviceLock("gpu-test")
    phase = timing_phase_with(lock)
    try:
        assert hog.ask("shared", LONG_S) is not None  # and never lets go
        with phase.held_together("rounds"):
            assert lock.exclusive_depth == 0  # let go again once the drain overran
            with phase.held():
                assert lock.exclusive_depth == 1 and lock.overran
        phases = phase.schedule.phases
        assert phases["device_windows"] == 2 and phases["device_shared_overrun"] == 1
    finally:
        hog.ask("release_shared")
        lock.close()
