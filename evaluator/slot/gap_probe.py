"""The judge's check that the reference had the GPU to itself while timed: one block of its own beside the reference's
calls, reading the GPU's global timer, sees a gap whenever another CUDA context (a candidate's spin kernels) ran."""

from __future__ import annotations

import os
import sys
import time
from typing import Callable, NamedTuple, Optional

from evaluator.slot.outcome import TimingContended

# Contexts of different processes share a GPU by time slices (no MPS): a process that keeps a one-thread spin kernel
# queued while the judge times the reference doubled a 6.9 ms batch of matrix products on an H200 (14.3 ms), and
# its CPU stays under the runner's CPU watch (session 25, call A, tests/bench/probe_time_slices.py). The probe saw
# every such batch: its largest gap between two reads of the timer was 2.44 ms beside the spinner, 0.35-0.51 us alone.
# Opt-in ("1"; off by default since session 26): queued with the reference's batch as it is now, the probe read honest
# windows as gapped in 39 of 48 Triton tasks at 8 slots on an H200 (13 of 16 at one slot, gates off too), and timing
# them again cost 5-12% of the rate, took identical torch code within ±5% from 31 to 26 of 32 and gave up an honest
# task. The gaps are the slot's own upkeep, which the device lock does not hold: at one slot the spares warming beside
# the windows (none gapped with them warmed under a shared hold), at 8 slots more besides (slot/upkeep_hold.py). Without
# the probe the spin attacks gained nothing either (0.62x; a spinning child ends `side_work`): session 26, calls A-G,
# docs/figures.md.
PROBE_ENV = "KRL_WORKER_TIMING_GAP_PROBE"
GAP_NS = 20_000  # one read of the timer to the next: a gap past this is the device working for another context
# A window whose gaps add up to more than this was not the reference's alone: timed again. 5% of a 5 ms batch, the
# self-speedup's own tolerance (0.1 ms at first); a spinning context's slices are ~2.4 ms each. Honest tasks at 8 slots
# had rounds timed again in 9 of 48 (Triton) and 13 of 32 (torch) at 0.25 ms, about as many as at 0.1 ms: their gaps
# are mostly other contexts' whole slices too (session 25, calls E and F; docs/figures.md).
GAPPED_NS = 250_000
# Past this many gapped windows in one task the judge gives up timing it: an infrastructure failure (retried once by
# the pool), since the judge cannot tell the candidate's runner from another slot's or another user's process. Either
# way the figure is not recorded, so a candidate that spins gains nothing. With the probe queued with the gated batch,
# honest tasks at 8 slots on an H200 had 2.5-2.9 gapped rounds each in 26 of 32 torch and 39 of 48 Triton tasks, and
# one torch task was given up twice (session 26, call A); with gates off, 11 of 80 (call C).
GAPPED_ROUNDS_MAX = 6
# A probe stops by itself after this long: where its end was never queued (a window abandoned), or where something
# between its start and end synchronised the whole device, which waits for the probe (a reference that calls
# torch.cuda.synchronize, the caching allocator freeing its blocks after a failed allocation). Such a window
# (`bounded`) is timed again and the task goes on without the probe (reference_watch.gapped_window).
PROBE_MAX_NS = 2_000_000_000


class Gaps(NamedTuple):
    total_ns: int
    largest_ns: int
    count: int
    bounded: int  # stretches of the window where the probe stopped by itself (PROBE_MAX_NS)

    def gapped(self) -> bool:
        return self.total_ns > GAPPED_NS


class GapProbe:
    """The probe on one device: `start()` then `end()` around each stretch of the reference's work (start queued before
    that work: each process has one hardware queue, isolation/environment.DEVICE_CONNECTIONS, so a probe queued after
    a stream's kernels waits for the last of them to be dispatched), then `read()` after the window's synchronisation,
    or `discard()` for a window given up. Both leave the totals at zero for the next window."""

    def __init__(self) -> None:
        import torch

        from evaluator.judging.gap_probe_kernel import gap_probe

        self.kernel = gap_probe
        self.flag = torch.zeros(1, dtype=torch.int32, device="cuda")
        self.out = torch.zeros(4, dtype=torch.int64, device="cuda")
        self.side = torch.cuda.Stream()
        self.zeroed = torch.cuda.Event()
        # Compiled and loaded once here: a module loaded at a first launch inside a timed window would be in it.
        self.start()
        self.end()
        torch.cuda.synchronize()
        self.read()

    def start(self, behind: Optional[Callable[[], None]] = None) -> None:
        """The probe, queued on its own stream: it runs from now (or, with `behind`, from whatever `behind` queues on
        that stream: a gate's wait) until end()'s flag."""
        import torch

        with torch.cuda.stream(self.side):
            if behind is not None:
                behind()
            self.flag.zero_()
            self.zeroed.record()
            self.kernel[(1,)](self.flag, self.out, PROBE_MAX_NS, GAP_NS, num_warps=1)

    def end(self) -> float:
        """The probe's flag, queued on the current stream after the work there (and after start()'s zeroing): the probe
        stops once that work has run. One small kernel, ~2 us of device time. Returns the host seconds the queueing
        took, for a clock that runs around it to take off."""
        import torch

        began = time.perf_counter()
        torch.cuda.current_stream().wait_event(self.zeroed)
        self.flag.fill_(1)
        return time.perf_counter() - began

    def read(self) -> Gaps:
        self.side.synchronize()
        gaps = Gaps(*(int(v) for v in self.out.tolist()))
        self.discard()
        return gaps

    def discard(self) -> None:
        """The totals back to zero, on the probe's stream after whatever probe is queued there."""
        import torch

        with torch.cuda.stream(self.side):
            self.out.zero_()


_probes: dict[int, Optional[GapProbe]] = {}


def probe_for_device() -> Optional[GapProbe]:
    """This process's probe on its current device, made on first use (judge_host warms it before the slot is ready);
    None unless PROBE_ENV turns it on, or where it cannot run here (no Triton, no global timer), said once on stderr."""
    if os.environ.get(PROBE_ENV, "0").strip() != "1":
        return None
    import torch

    if not torch.cuda.is_available():  # a GPU phase's code run without one (the slot's CPU tests of its schedule)
        return None
    device = torch.cuda.current_device()
    if device not in _probes:
        try:
            _probes[device] = GapProbe()
        except Exception as exc:  # noqa: BLE001 - the probe is a check beside the timing, not a part of it
            print(f"The gap probe cannot run here ({type(exc).__name__}: {exc}); the reference's windows are watched "
                  "on the CPU only.", file=sys.stderr, flush=True)
            _probes[device] = None
    return _probes[device]


def contended(gapped_rounds: int, gaps: Gaps) -> TimingContended:
    return TimingContended(
        f"Another CUDA context held the GPU while the judge timed the reference in {gapped_rounds} rounds (the last "
        f"lost {gaps.total_ns / 1e6:.2f} ms in {gaps.count} gaps, the longest {gaps.largest_ns / 1e6:.2f} ms); the "
        "timing could not be taken quietly. Keep other processes off the evaluator's GPUs.")
