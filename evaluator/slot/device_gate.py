"""A gate on a GPU stream that another process opens: work queued behind it waits on the device until a page of host
memory says go, then reads the shift written with the count. The judge times both sides' batches through it."""

# A batch queued behind a gate starts when the judge writes the page, so the judge's clock from that write to the
# batch's end holds device work only: the host's speed at issuing launches (10-18 us a call by process on an H100 host,
# which read identical launch-bound code at 0.81-1.06 by runner) stays out of both sides. The batch's values are made
# on the device from the shift written as the gate opens, so a runner that computed before the gate has no values to
# compute on. Page layout: the gate's count (uint32) at GATE_AT, the shift (float32 in [0, 1)) at SHIFT_AT; the writer
# stores the shift before the count.

from __future__ import annotations

import ctypes
import mmap
import os
import struct
import subprocess
import sys
import time
from typing import Any

PAGE_BYTES = 4096
GATE_AT, SHIFT_AT = 0, 8
PAGE_NAME = "gate-page"  # in the judge's inputs folder, which runners see read-only
_WAIT_GEQ = 0x0  # CU_STREAM_WAIT_VALUE_GEQ: go once (int32)(*page - count) >= 0
_REGISTER_PORTABLE, _REGISTER_MAPPED, _REGISTER_READ_ONLY = 0x01, 0x02, 0x08


class GateUnavailable(Exception):
    """This process cannot wait on the page (no driver entry point, registration refused): time without a gate."""


def _driver() -> Any:
    try:
        library = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise GateUnavailable(f"no CUDA driver library: {exc}") from None
    wait = getattr(library, "cuStreamWaitValue32_v2", None) or getattr(library, "cuStreamWaitValue32", None)
    if wait is None:
        raise GateUnavailable("the CUDA driver has no cuStreamWaitValue32")
    pointer = getattr(library, "cuMemHostGetDevicePointer_v2", None)
    if pointer is None:
        raise GateUnavailable("the CUDA driver has no cuMemHostGetDevicePointer_v2")
    wait.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
    pointer.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p, ctypes.c_uint]
    return pointer, wait


class DeviceGate:
    """The waiting side, in the process whose stream waits: a page at `address` (PAGE_BYTES, page-aligned) registered
    with CUDA (read-only where the process may not write it)."""

    def __init__(self, address: int, read_only: bool):
        import torch

        device_pointer_of, self._wait = _driver()
        flags = _REGISTER_PORTABLE | _REGISTER_MAPPED | (_REGISTER_READ_ONLY if read_only else 0)
        status = torch.cuda.cudart().cudaHostRegister(address, PAGE_BYTES, flags)
        if int(status) != 0:
            raise GateUnavailable(f"cudaHostRegister refused the gate's page ({status})")
        device_pointer = ctypes.c_uint64()
        if device_pointer_of(ctypes.byref(device_pointer), ctypes.c_void_p(address), 0) != 0:
            raise GateUnavailable("no device address for the gate's page")
        self.device_pointer = device_pointer.value
        self._cells = (ctypes.c_float * 1).from_address(address + SHIFT_AT)  # kept alive under the tensor below
        # The shift's host cell as a tensor on registered (pinned) memory: an asynchronous copy reads it when the
        # copy runs on the device, after the wait, not when it is queued.
        self.shift_host = torch.frombuffer(self._cells, dtype=torch.float32)
        self.shift = torch.zeros(1, dtype=torch.float32, device="cuda")
        self.warm()

    def wait(self, count: int, shift: bool = True) -> Any:
        """Queue, on the current stream, a wait for the page's count to reach `count`, then (with `shift`) the shift's
        copy to the device. Returns the device tensor the shift lands in (read by the work queued after it)."""
        import torch

        stream = torch.cuda.current_stream().cuda_stream
        status = self._wait(ctypes.c_void_p(stream), ctypes.c_uint64(self.device_pointer),
                            ctypes.c_uint32(count & 0xFFFFFFFF), ctypes.c_uint(_WAIT_GEQ))
        if status != 0:
            raise GateUnavailable(f"cuStreamWaitValue32 failed ({status})")
        if shift:
            self.shift.copy_(self.shift_host, non_blocking=True)
        return self.shift

    def warm(self) -> None:
        """A wait already satisfied (count 0) and the shift's arithmetic (judge.nudged_batch) once: CUDA loads a kernel's
        module at its first launch, and a load queued behind a shut gate waited for it (2 s on an H100, then forced)."""
        import torch

        from evaluator.judging import judge

        shift = self.wait(0)
        judge.shifted_factors(torch.rand(1 << 16, device="cuda"), shift)  # the variant a batch's draws take
        torch.cuda.synchronize()


class GateWriter:
    """The opening side: writes the count and the shift into a page it may write (a mapped file the runner reads, or
    the judge's own page). The page holds the count: a keeper (GateKeeper) may have moved it."""

    def __init__(self, buffer: Any):
        self.buffer = buffer  # anything writable by slice: an mmap, a ctypes array

    def count(self) -> int:
        return struct.unpack("<I", self.buffer[GATE_AT:GATE_AT + 4])[0]

    def next(self) -> int:
        """The count the next batch waits for."""
        return self.count() + 1

    def open(self, shift: float) -> None:
        """Opens the gate for the batch queued behind next(): the shift first, then the count."""
        self.buffer[SHIFT_AT:SHIFT_AT + 4] = struct.pack("<f", shift)
        self._write(self.count() + 1)

    def open_all(self) -> None:
        """Whatever waits behind this page goes (a batch whose round was abandoned must not stay queued)."""
        self._write(self.count() + FORCED_STEP)

    def _write(self, count: int) -> None:
        self.buffer[GATE_AT:GATE_AT + 4] = struct.pack("<I", count & 0xFFFFFFFF)


# The keeper's program: it opens the page (FORCED_STEP on its count) when an armed deadline passes before the judge
# disarms it; it ends when the judge's end of the pipe closes.
_KEEPER = """
import mmap, os, select, struct, sys, time
page = mmap.mmap(int(sys.argv[1]), %d, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
orders, deadline = int(sys.argv[2]), 0.0
while True:
    ready = select.select([orders], [], [], max(0.0, deadline - time.monotonic()) if deadline else None)[0]
    if ready:
        data = os.read(orders, 8)
        if len(data) < 8:
            break
        deadline = struct.unpack("<d", data)[0]
    elif deadline:
        count = struct.unpack("<I", page[%d:%d])[0]
        page[%d:%d] = struct.pack("<I", (count + %d) & 0xFFFFFFFF)
        deadline = 0.0
"""
FORCED_STEP = 1 << 20  # a forced opening moves the count this far: past every batch queued behind the page


class GateKeeper:
    """A process of its own that opens the judge's page at a deadline unless disarmed first. The judge's thread may be
    blocked inside CUDA while its batch waits behind its own shut gate (a launch into a full queue, a reference that
    synchronises), and it blocks there holding Python's lock, so no thread of the judge could open the gate."""

    def __init__(self, page_fd: int):
        orders_r, self.orders_w = os.pipe()
        program = _KEEPER % (PAGE_BYTES, GATE_AT, GATE_AT + 4, GATE_AT, GATE_AT + 4, FORCED_STEP)
        try:
            self.process = subprocess.Popen([sys.executable, "-c", program, str(page_fd), str(orders_r)],
                                            pass_fds=(page_fd, orders_r), stdin=subprocess.DEVNULL)
        finally:
            os.close(orders_r)

    def arm(self, seconds: float) -> None:
        os.write(self.orders_w, struct.pack("<d", time.monotonic() + seconds))

    def disarm(self) -> None:
        os.write(self.orders_w, struct.pack("<d", 0.0))


def runner_page(path: str) -> int:
    """The address of the judge's page at `path`, mapped read-only and shared (the judge's writes show through), for
    the runner's life. Mapped through libc: Python's mmap gives no address for a read-only mapping. The file is opened
    read-only, so no later mprotect can make the mapping writable."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    descriptor = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, PAGE_BYTES, mmap.PROT_READ, mmap.MAP_SHARED, descriptor, 0)
    finally:
        os.close(descriptor)
    if address in (None, ctypes.c_void_p(-1).value):
        raise GateUnavailable(f"the gate's page could not be mapped (errno {ctypes.get_errno()})")
    return address


def judge_page(path: str) -> GateWriter:
    """A fresh page file at `path` (zeros: every gate shut), mapped shared and writable by the judge."""
    with open(path, "wb") as handle:
        handle.write(bytes(PAGE_BYTES))
    descriptor = os.open(path, os.O_RDWR)
    try:
        page = mmap.mmap(descriptor, PAGE_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(descriptor)
    return GateWriter(page)


class OwnGate:
    """The judge's own gate, which its reference batches wait on: one shared-memory page of this process, registered
    once, and its keeper."""

    def __init__(self):
        descriptor = os.memfd_create("krl-gate")
        os.ftruncate(descriptor, PAGE_BYTES)
        self.page = mmap.mmap(descriptor, PAGE_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.writer = GateWriter(self.page)
        # The page stays mapped for the process's life: CUDA keeps its address.
        self.gate = DeviceGate(ctypes.addressof(ctypes.c_char.from_buffer(self.page)), read_only=False)
        self.keeper = GateKeeper(descriptor)
        os.close(descriptor)

    def queueing(self, seconds: float) -> "_Queueing":
        """`with own.queueing(s) as queued:` the block queues behind next(); afterwards queued.forced says whether the
        keeper had to open the gate (the block was blocked for `seconds`)."""
        return _Queueing(self, seconds)


class _Queueing:
    def __init__(self, own: OwnGate, seconds: float):
        self.own, self.seconds, self.forced = own, seconds, False

    def __enter__(self) -> "_Queueing":
        self.expected = self.own.writer.count()
        self.own.keeper.arm(self.seconds)
        return self

    def __exit__(self, *exc: Any) -> None:
        # A keeper whose deadline passed just as the queueing ended can still open the gate after this reading: that
        # round's reference then starts before its timing and reads fast, which lowers the candidate's speedup only.
        self.own.keeper.disarm()
        self.forced = self.own.writer.count() != self.expected


_OWN: dict = {}  # this process's OwnGate once made ("gate"), or why it cannot have one ("why")


def own_gate() -> OwnGate:
    """This process's OwnGate, made at the first call; GateUnavailable, for good, where it cannot be made."""
    if not _OWN:
        try:
            _OWN["gate"] = OwnGate()
        except Exception as exc:  # noqa: BLE001 - no gate, for good: the judge times without one
            _OWN["why"] = f"{type(exc).__name__}: {exc}"
    if "gate" not in _OWN:
        raise GateUnavailable(f"this process has no gate ({_OWN['why']})")
    return _OWN["gate"]
