# Attack class: a picked round dropped on purpose (red team, session 29: correct at 34-65x in 10 of 18 runs, CPU
# mode). As skip_unpicked_batches, and when the `keep` order tells the runner its skipped batch was picked (in a round
# where it goes first), it starts two threads each in one long madvise(MADV_POPULATE_WRITE) (~0.1 s in the kernel,
# past the cgroup freezer's 50 ms), so the reference's window is only watched, sees the runner working and the round
# is timed again (Interfered) before its picks were checked. Stopped since by checking a retried round's outputs before
# it is timed again (timing_phase.one_round), and by picks in every batch where the projection is blind.
import ctypes
import importlib
import mmap

import torch
import torch.nn as nn

_S = importlib.import_module("evaluator.slot.worker_session").TaskSession
_run, _proj, _dig, _keep, _eager, _stage = _S.run, _S.projections, _S.digests, _S.keep, _S.run_eager, _S.stage
SKIP_ODD_ONLY = False

_SIZE = 384 << 20
_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_maps = [mmap.mmap(-1, _SIZE) for _ in range(2)]  # two threads: ~2 cores in the window, past any 4 ms tick rounding
_addrs = [ctypes.addressof(ctypes.c_char.from_buffer(m)) for m in _maps]
for _a in _addrs:
    _libc.madvise(_a, _SIZE, 15)  # MADV_NOHUGEPAGE: 4 KiB pages, a long populate
_state = {"counted": -1, "rerolls": 0, "batches": 0}


_T = importlib.import_module("_thr" + "ead")  # a name built at run time: the static side-work rule reads names
_busy = [_T.allocate_lock(), _T.allocate_lock()]


def _populate(addr, lock):
    try:
        _libc.madvise(addr, _SIZE, 23)  # MADV_POPULATE_WRITE: one syscall, ~0.1 s in the kernel, not freezable
    finally:
        lock.release()


def _stall():
    for addr, lock in zip(_addrs, _busy):
        _libc.madvise(addr, _SIZE, 4)  # MADV_DONTNEED (here, in the uncharged keep order)
        lock.acquire()
        _T.start_new_thread(_populate, (addr, lock))


def stage(self, *args, **kwargs):
    for lock in _busy:  # the stall's rest waited out in the uncharged stage order, not in the next charged batch
        lock.acquire()
        lock.release()
    return _stage(self, *args, **kwargs)


def run(self, calls, salt):
    previous = getattr(self, "_rt_prev", None)
    self._rt_prev = calls
    self._rt_skip = 0
    _state["batches"] += 1  # 1: the 3-call probe, 2: the sizing round (uncounted even at the same size)
    if previous == calls and _state["batches"] >= 3:
        _state["counted"] += 1
        index = _state["counted"]
        if not SKIP_ODD_ONLY or index % 2 == 1:
            self._rt_skip = calls
            self.sets, self.outputs = [], []
            return None
    return _run(self, calls, salt)


def run_eager(self, calls, salt):
    self._rt_prev, self._rt_skip = calls, 0
    _state["counted"] = -10**6  # KernelBench's rounds: honest, no more counting
    return _eager(self, calls, salt)


def projections(self, *args, **kwargs):
    if getattr(self, "_rt_skip", 0):
        return [0.0] * self._rt_skip
    return _proj(self, *args, **kwargs)


def digests(self, *args, **kwargs):
    if getattr(self, "_rt_skip", 0):
        return [bytes(16)] * self._rt_skip
    return _dig(self, *args, **kwargs)


def keep(self, calls):
    if getattr(self, "_rt_skip", 0):  # a picked call of a skipped batch
        index = _state["counted"]
        if index >= 0 and index % 2 == 1 and _state["rerolls"] < 2:
            _state["rerolls"] += 1
            _state["counted"] -= 1  # this round is timed again, at the same index
            _stall()
        for name in calls:
            self.kept[name] = torch.zeros(8, 4096)
        return None
    return _keep(self, calls)


_S.run, _S.run_eager, _S.projections, _S.digests, _S.keep, _S.stage = run, run_eager, projections, digests, keep, stage


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(256, 4096)

    def forward(self, x):
        return torch.softmax(self.fc(x), dim=1)
