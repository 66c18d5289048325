"""One GPU's lock (two flocks on its UUID, held by trusted judges only): exclusive while a task times, shared around
each other GPU step of a slot (a runner's order outside timing, the judge's inputs, comparisons); writer preference."""

from __future__ import annotations

import fcntl
import os
import time
from typing import Optional

LOCK_DIR_ENV = "KRL_DEVICE_LOCK_DIR"
# A timing holds the device once per round (a few ms on an H100), so a waiter's poll is a gap the GPU sits idle in
# between two slots' rounds: 0.5 ms keeps it a small share of a round, at a few thousand flock calls a second.
POLL_S = 0.0005
# How long an exclusive holder waits for the shared holders already on the device (new ones are held at the gate
# meanwhile) before it goes on beside them. An honest shared step ends well within it (a correctness trial with
# Triton's JIT in a fresh runner: ~0.9 s on an H100); a hostile candidate's order can spin up to its task's limit
# (60 s), and no other slot's timing may wait on it that long. Past it the timing runs anyway: its own retry of
# unsteady rounds absorbs the interference, and `overran` tells the caller so it can be recorded.
SHARED_DRAIN_MAX_S = 2.0


def lock_path(device_uuid: str) -> str:
    folder = os.environ.get(LOCK_DIR_ENV) or "/tmp"
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in device_uuid)[:80] or "device"
    return os.path.join(folder, f"krl-device-{safe}.lock")


class DeviceLock:
    """Exclusive: `acquire(deadline)` -> seconds waited, or None at the deadline; `release()`. Shared:
    `acquire_shared(deadline)`, `release_shared()`. One object per judge process (not thread-safe).

    Two files: the gate and the device. A shared holder takes the gate shared, then the device shared, then lets the
    gate go, never waiting while it holds the gate. An exclusive holder takes the gate exclusive (no new shared holder
    gets in: writer preference), then the device exclusive (the shared holders already in drain), and keeps both
    while it times. Exclusive holders exclude each other at the gate, so after a drain that overran (`overran`) the
    timing holds the gate alone and still excludes every other timing and every new shared step.

    Both kinds nest in one process without waiting on itself (two flocks of one process on separate descriptions
    would): shared inside exclusive takes nothing more; exclusive inside shared gives the share up while it drains and
    takes it back when the exclusive hold ends."""

    def __init__(self, device_uuid: str):
        self.path = lock_path(device_uuid)
        self.gate_path = self.path[: -len(".lock")] + ".gate"
        self.fds: dict[str, int] = {}
        self.exclusive_depth = self.shared_depth = 0
        self.device_held = False  # the exclusive hold has the device file (not after a drain that overran)
        self.overran = False  # the last exclusive acquisition went on beside shared holders that did not drain
        self.contended = False  # the last exclusive acquisition waited for another timing to let the gate go
        self.drained_s = 0.0  # of the last exclusive acquisition's wait, the part spent draining the shared holders

    # ---- exclusive
    def acquire(self, deadline: float, drain_s: float = SHARED_DRAIN_MAX_S) -> Optional[float]:
        if self.exclusive_depth:
            self.exclusive_depth += 1
            self.contended = False
            self.drained_s = 0.0
            return 0.0
        started = time.monotonic()
        self.overran = self.device_held = self.contended = False
        if self.shared_depth:
            self._unlock(self.path)  # this process's own share would hold up its own drain
        while not self._try(self.gate_path, fcntl.LOCK_EX):
            if time.monotonic() >= deadline:
                self._take_share_back()
                return None
            self.contended = True  # another timing held it: had as it let go
            time.sleep(POLL_S)
        gate_had = time.monotonic()
        drained_by = min(deadline, gate_had + drain_s)
        while not self._try(self.path, fcntl.LOCK_EX):
            if time.monotonic() >= drained_by:
                break
            time.sleep(POLL_S)
        else:
            self.device_held = True
        self.drained_s = time.monotonic() - gate_had
        if not self.device_held and time.monotonic() >= deadline:
            self._unlock(self.gate_path)
            self._take_share_back()
            return None
        self.overran = not self.device_held
        self.exclusive_depth = 1
        return time.monotonic() - started

    def release(self) -> None:
        if not self.exclusive_depth:
            return
        self.exclusive_depth -= 1
        if self.exclusive_depth:
            return
        if self.shared_depth:
            # Back to the share it held before: no one else can hold the device exclusive while this gate is held,
            # so this never waits.
            self._try(self.path, fcntl.LOCK_SH)
        elif self.device_held:
            self._unlock(self.path)
        self.device_held = False
        self._unlock(self.gate_path)

    # ---- shared
    def acquire_shared(self, deadline: float) -> Optional[float]:
        if self.exclusive_depth or self.shared_depth:
            self.shared_depth += 1
            return 0.0
        started = time.monotonic()
        while not self._enter_shared():
            if time.monotonic() >= deadline:
                return None
            time.sleep(POLL_S)
        self.shared_depth = 1
        return time.monotonic() - started

    def release_shared(self) -> None:
        if not self.shared_depth:
            return
        self.shared_depth -= 1
        if not self.shared_depth and not self.exclusive_depth:
            self._unlock(self.path)

    def close(self) -> None:
        """Every hold ends (the files' locks go with their descriptors)."""
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()
        self.exclusive_depth = self.shared_depth = 0
        self.device_held = False

    # ---- the two files
    def _enter_shared(self) -> bool:
        """Gate shared (refused while a timing holds or waits for the device), device shared, gate let go: at once."""
        if not self._try(self.gate_path, fcntl.LOCK_SH):
            return False
        try:
            return self._try(self.path, fcntl.LOCK_SH)
        finally:
            self._unlock(self.gate_path)

    def _take_share_back(self) -> None:
        """After an exclusive acquisition that failed: the share it gave up, if it can be had at once (else the task
        is ending at its deadline anyway)."""
        if self.shared_depth:
            self._enter_shared()

    def _fd(self, path: str) -> int:
        if path not in self.fds:  # one description per file, kept open: this process's holds on it are one lock
            self.fds[path] = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        return self.fds[path]

    def _try(self, path: str, mode: int) -> bool:
        try:
            fcntl.flock(self._fd(path), mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def _unlock(self, path: str) -> None:
        fcntl.flock(self._fd(path), fcntl.LOCK_UN)


def device_uuid(index: int = 0) -> str:
    """The visible GPU's UUID (stable across processes that number devices differently), or its index."""
    try:
        import torch

        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        if uuid:
            return str(uuid)
    except Exception:  # noqa: BLE001 - no CUDA here: one lock per index still serialises the timing
        pass
    return f"index-{os.environ.get('CUDA_VISIBLE_DEVICES', '')}-{index}"
