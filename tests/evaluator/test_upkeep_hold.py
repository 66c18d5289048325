"""The slot's upkeep held shared on a real device lock behind its knobs (slot/upkeep_hold.py): nothing held by default,
a timing of another process kept off while a knob holds it (spares warming beside a task too), and a killed
process's exit awaited."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from evaluator.isolation.device_lock import DeviceLock
from evaluator.slot import upkeep_hold
from tests.evaluator.test_device_lock import LONG_S, SHORT_S, holders, lock_dir  # noqa: F401 - fixtures


def test_upkeep_holds_nothing_by_default(holders, monkeypatch):  # noqa: F811
    monkeypatch.delenv(upkeep_hold.UPKEEP_ENV, raising=False)
    lock = DeviceLock("gpu-test")
    try:
        with upkeep_hold.upkeep_shared(lock) as held:
            assert not held
            waited, _ = holders[0].ask("exclusive", SHORT_S, LONG_S)  # a timing of another slot goes on at once
            assert waited is not None
            holders[0].ask("release")
        with upkeep_hold.upkeep_shared(None) as held:  # CPU mode: no lock
            assert not held
    finally:
        lock.close()


def test_a_knob_holds_the_device_shared_over_the_upkeep(holders, monkeypatch):  # noqa: F811
    monkeypatch.setenv(upkeep_hold.SPARES_ENV, "1")
    lock = DeviceLock("gpu-test")
    try:
        with upkeep_hold.upkeep_shared(lock, upkeep_hold.SPARES_ENV) as held:
            assert held
            assert holders[0].ask("shared", LONG_S) is not None  # other slots' shared steps go on beside it
            holders[0].ask("release_shared")
            waited, overran = holders[1].ask("exclusive", LONG_S, 0.2)  # a timing waits for it to drain
            assert waited is not None and overran
            holders[1].ask("release")
        waited, overran = holders[1].ask("exclusive", LONG_S, LONG_S)  # let go after the block
        assert waited is not None and not overran
        holders[1].ask("release")
    finally:
        lock.close()


def test_the_wait_for_a_killed_process_ends_at_its_exit():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = time.monotonic()
        upkeep_hold.wait_exited(child.pid, seconds=0.2)  # alive: waits its whole bound
        assert time.monotonic() - started >= 0.2
        child.send_signal(signal.SIGKILL)
        started = time.monotonic()
        upkeep_hold.wait_exited(child.pid, seconds=30)  # a zombie, not reaped yet: done at once
        assert time.monotonic() - started < 10
    finally:
        child.kill()
        child.wait()
    upkeep_hold.wait_exited(child.pid, seconds=30)  # gone


def test_spares_warming_beside_a_task_hold_the_device_shared_until_let_go(holders, monkeypatch):  # noqa: F811
    monkeypatch.setenv(upkeep_hold.SPARES_ENV, upkeep_hold.SPARES_BESIDE)
    assert upkeep_hold.spares_beside() and not upkeep_hold.wanted(upkeep_hold.SPARES_ENV)  # not the "before" knob
    lock = DeviceLock("gpu-test")
    share = upkeep_hold.SparesShare(lock)
    try:
        share.take()
        share.take()  # once only: one let_go ends it
        assert share.held
        with upkeep_hold.upkeep_shared(lock, upkeep_hold.SPARES_ENV) as held:
            assert not held
        assert lock.acquire_shared(time.monotonic() + LONG_S) == 0.0  # the task's own steps nest inside it
        lock.release_shared()
        waited, overran = holders[0].ask("exclusive", LONG_S, 0.2)  # another slot's timing waits for it to drain
        assert waited is not None and overran
        holders[0].ask("release")
        share.let_go()
        share.let_go()
        waited, overran = holders[0].ask("exclusive", LONG_S, LONG_S)
        assert waited is not None and not overran
        holders[0].ask("release")
    finally:
        lock.close()
    upkeep_hold.SparesShare(None).take()  # CPU mode: nothing to hold
