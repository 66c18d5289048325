"""One task at a time times on a GPU: an flock keyed on the GPU's UUID, held only while a task times, so loading,
JIT, input making and comparisons of other runners overlap with it. Held by the trusted judge, never by a runner."""

from __future__ import annotations

import fcntl
import os
import time
from typing import Optional

LOCK_DIR_ENV = "KRL_DEVICE_LOCK_DIR"
POLL_S = 0.002


def lock_path(device_uuid: str) -> str:
    folder = os.environ.get(LOCK_DIR_ENV) or "/tmp"
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in device_uuid)[:80] or "device"
    return os.path.join(folder, f"krl-device-{safe}.lock")


class DeviceLock:
    """`acquire(deadline)` -> seconds waited, or None at the deadline; `release()`. Re-entrant for one holder."""

    def __init__(self, device_uuid: str):
        self.path = lock_path(device_uuid)
        self.fd: Optional[int] = None
        self.depth = 0

    def acquire(self, deadline: float) -> Optional[float]:
        if self.depth:
            self.depth += 1
            return 0.0
        started = time.monotonic()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.fd, self.depth = fd, 1
                return time.monotonic() - started
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return None
                time.sleep(POLL_S)

    def release(self) -> None:
        if not self.depth:
            return
        self.depth -= 1
        if not self.depth and self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


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
