"""Runtime measurement inside a worker: CUDA events on a GPU, a monotonic clock on the CPU.
Reference and candidate are measured in the same process on the same inputs, interleaved, medians reported."""

from __future__ import annotations

import functools
import math
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

from evaluator.contract.types import RuntimeStats

CLOCK_CUDA = "cuda_events"
CLOCK_MONOTONIC = "monotonic"
# Bumped whenever the measurement protocol changes, so cached reference timings from an older protocol are not reused.
PROTOCOL_VERSION = 8  # 4: timed calls rotate fresh input values; 5: rounds run on a slowed GPU are replaced; 6: CPU host
# clock; 7: speedup is the median of per-round ratios, and GPU timed calls get values no earlier call had; 8: a hold
# kernel ahead of every GPU sample keeps the host's launch speed out of it


@dataclass(frozen=True)
class TimingSettings:
    """How to time; part of the reference-timing cache key."""

    trials: int = 100
    warmup: int = 10
    # Warm up for at least this long so the GPU leaves its idle clocks before the first sample.
    warmup_min_ms: float = 30.0
    # Each sample spans at least this much GPU time (several calls per event pair for tiny kernels):
    # a ~15 µs call timed alone is dominated by event jitter and launch gaps.
    sample_min_ms: float = 0.0
    max_calls_per_sample: int = 64
    # Tiny kernels get more samples (up to trials * extra_trials_factor) until this much time was measured.
    min_measured_ms: float = 0.0
    extra_trials_factor: int = 1
    flush_l2: bool = True
    # The L2 flush before every sample is a fixed memset: when it takes longer than this many times the fastest flush
    # this process has seen, the GPU ran slow (clocks, another tenant) during that round, and the round (every
    # callable's sample) is replaced by a later one. On an H100 the speedup of an evaluation drifted by up to 1.5x on a
    # quiet machine where reference and candidate were both 2-3x slower in some evaluations (bench_timing_under_load).
    # 0 turns it off.
    max_flush_slowdown: float = 1.25
    # Queue a spin kernel (LaunchHold) ahead of every GPU sample, so the sample measures the device's work rather than
    # how fast a (loaded) host issued its launches.
    hold_launches: bool = True
    # Upper bound on the wall time spent sampling one callable (CPU mode and very slow kernels).
    budget_s: float = 10.0

    def key(self) -> tuple:
        return (PROTOCOL_VERSION,) + tuple(sorted(asdict(self).items()))


def paired_speedup(reference_ms: list[float], candidate_ms: list[float]) -> float:
    """The median over rounds of reference time / candidate time, both from the same round (samples of one round are
    taken back to back, in ABBA order). A machine whose speed changes during an evaluation (clocks, another tenant,
    host load) moves both samples of a round together, so the ratio holds; the ratio of two medians does not: when
    half the rounds ran slow, each median lands anywhere between the slow and the fast mode, and the two land apart
    (an RMSNorm measured 1.96x and 4.04x in two quiet H100 evaluations that way)."""
    ratios = [r / c for r, c in zip(reference_ms, candidate_ms) if c > 0 and r == r and c == c]
    return statistics.median(ratios) if ratios else math.nan


def summarize(samples_ms: list[float]) -> RuntimeStats:
    """Median, mean, std, min, max and IQR of samples in milliseconds."""
    values = sorted(float(v) for v in samples_ms)
    n = len(values)
    if n == 0:
        return RuntimeStats(median_ms=math.nan, mean_ms=math.nan, std_ms=math.nan, min_ms=math.nan, max_ms=math.nan,
                            iqr_ms=math.nan, n=0)
    if n >= 2:
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    else:
        q1 = q3 = values[0]
    return RuntimeStats(
        median_ms=statistics.median(values),
        mean_ms=statistics.fmean(values),
        std_ms=statistics.pstdev(values) if n > 1 else 0.0,
        min_ms=values[0],
        max_ms=values[-1],
        iqr_ms=q3 - q1,
        n=n,
    )


class L2Flusher:
    """Overwrites a buffer twice the L2 size so every sample starts with a cold cache (and a busy GPU queue).
    `fastest_ms` is the quickest flush timed in this process: the yardstick of a GPU running at full speed."""

    fastest_ms: float = math.inf

    def __init__(self, device: Any):
        import torch

        props = torch.cuda.get_device_properties(device)
        l2_bytes = int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)
        self.buffer = torch.empty(max(2 * l2_bytes, 64 * 2**20) // 4, dtype=torch.int32, device=device)

    def flush(self) -> None:
        self.buffer.zero_()


class LaunchHold:
    """A spin kernel (torch.cuda._sleep) queued ahead of each GPU sample, long enough for the host to queue the whole
    sample before the GPU reaches its start event. Without it a launch-bound callable (tens of µs of GPU work in several
    launches) is timed partly on the host: the GPU idles between launches as long as the host takes to issue them, and
    that time grows when compile workers load the CPUs, more for a reference of several launches than for a fused
    candidate of one. With it the event pair sees the launches back to back, as they run in a CUDA graph or behind a
    busy queue. (NVIDIA's nvbench holds its stream with a blocking kernel for the same reason.)"""

    ENV = "KRL_WORKER_TIMING_HOLD"  # "0": no hold (what tests/bench/bench_timing_under_load.py compares against)
    MARGIN = 3.0  # hold for this many times the host's median time to issue the sample (a loaded host runs slower)
    FIXED_MS = 0.03  # the flush and the two events the host issues behind the hold
    MAX_MS = 2.0  # a host that needs longer is the candidate's own doing (syncs, Python loops): left in the sample

    def __init__(self):
        import torch

        self._spin = torch.cuda._sleep  # taken before any candidate runs: patching torch.cuda later changes nothing
        cycles = 200_000
        self._spin(cycles)  # the spin kernel's first launch loads its module
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        self._spin(cycles)
        end.record()
        end.synchronize()
        self.cycles_per_ms = cycles / max(start.elapsed_time(end), 1e-3)

    def cycles(self, host_ms: float) -> int:
        """Spin cycles covering `host_ms` of host time to issue one sample's calls."""
        return int(self.cycles_per_ms * min(self.MAX_MS, self.MARGIN * host_ms + self.FIXED_MS))

    def hold(self, cycles: int) -> None:
        self._spin(cycles)


def profiler_events(body: Callable[[], Any], cpu: bool = False, synchronize: bool = True) -> list | None:
    """Profiler events (GPU activity, and CPU with `cpu`) of what `body` does, the GPU synchronised (unless not
    `synchronize`: no GPU) before the profiler stops; None when the profiler itself fails to start, stop or report, so
    an evaluator problem is never blamed on the candidate. `body`'s own exceptions propagate.
    torch.profiler by default. With KRL_WORKER_PROFILER=direct, on a GPU, the device work comes from CUPTI's activity
    API directly (judging/cupti_activity.py), without CPU events: ~40 ms for a first session in a plain process against
    torch.profiler's 4-6 s of CPU (H100, torch 2.11), but slower inside the sandboxed runner for reasons not found;
    torch.profiler where that recorder cannot open."""
    import torch

    if synchronize and torch.cuda.is_available():
        from evaluator.judging import cupti_activity

        direct = cupti_activity.recorder()
        if direct is not None:
            failed = []

            def guarded() -> None:  # body's exceptions propagate; CUPTI's own trouble reads as no profile
                try:
                    body()
                except BaseException as error:
                    failed.append(error)
            try:
                found = direct.record(guarded, torch.cuda.synchronize)
            except Exception:  # noqa: BLE001 - CUPTI refused or the device faulted: decided by the caller's checks
                found = None
            if failed:
                raise failed[0]
            return found
    try:
        from torch.profiler import ProfilerActivity, profile

        prof = profile(activities=[ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if cpu else []))
        _CUPTI_ATTACHED[0] = True  # Kineto attaches CUPTI as the session starts and keeps it (release_cupti)
        prof.__enter__()
    except Exception:
        return None
    stopped = False
    try:
        body()
        if synchronize:
            torch.cuda.synchronize()
    finally:
        try:
            prof.__exit__(None, None, None)
            stopped = True
        except Exception:
            pass
    try:
        return list(prof.events()) if stopped else None
    except Exception:
        return None


# "0" keeps a slot runner's CUPTI attached after its profiling; by default (anything else) the runner detaches it
# (release_cupti). Kineto keeps CUPTI attached after a torch.profiler session unless TEARDOWN_CUPTI=1 (kineto's
# cuptiTearDown_; pytorch issue 144455: training 10-20% slower after profiling had ended). A runner profiles at its
# warm-up and in its kernel checks, the judge never does. Identical torch code at 8 slots on an H100 (32 tasks):
# attached, median self-speedup 0.70 (KernelBench convention 0.90); detached, 0.86 (1.00).
CUPTI_TEARDOWN_ENV = "KRL_WORKER_CUPTI_TEARDOWN"


# "0" turns a slot runner's profiler off (a measurement's A/B of what CUPTI costs a host, docs/known-gaps.md): no
# CUPTI set-up in its warm-up, no profile in its kernel checks, so no own-kernel share and no launch finding from a
# profile; a Triton candidate's launches are still counted by the launch counter (rules.runtime.LaunchCounter).
KERNEL_PROFILE_ENV = "KRL_WORKER_KERNEL_PROFILE"


def kernel_profile_wanted() -> bool:
    import os

    return os.environ.get(KERNEL_PROFILE_ENV, "1").strip() != "0"


def cupti_teardown_wanted() -> bool:
    """Whether a runner detaches CUPTI after its profiling: yes unless CUPTI_TEARDOWN_ENV is "0"."""
    import os

    return os.environ.get(CUPTI_TEARDOWN_ENV, "1").strip() != "0"


_CUPTI_ATTACHED = [False]  # a torch.profiler session has run in this process (and not been torn down since)


def release_cupti() -> bool:
    """Where wanted (cupti_teardown_wanted), a GPU is present and a profiler session attached CUPTI: one empty
    torch.profiler session with TEARDOWN_CUPTI=1, so Kineto tears CUPTI down as it ends (on the next CUDA call: the
    synchronisation here). For a process that profiles no more. True when it ran."""
    import os

    import torch

    if not _CUPTI_ATTACHED[0] or not cupti_teardown_wanted() or not torch.cuda.is_available():
        return False
    os.environ["TEARDOWN_CUPTI"] = "1"
    profiler_events(lambda: None)
    torch.cuda.synchronize()
    _CUPTI_ATTACHED[0] = False
    return True


def profile_behind_hold(fn: Callable[[], Any], hold: LaunchHold, calls: int = 3) -> list | None:
    """Profiler events of `calls` calls of `fn`, each queued behind a hold far longer than the host takes to issue it
    (rules.runtime.check_early_start reads them); None when the profiler fails. `fn`'s own exceptions propagate."""
    import torch

    torch.cuda.synchronize()
    began = time.perf_counter()
    fn()
    issue_ms = (time.perf_counter() - began) * 1e3
    torch.cuda.synchronize()
    cycles = int(hold.cycles_per_ms * min(50.0, 1.0 + 10 * issue_ms))

    def held_calls() -> None:
        for _ in range(calls):
            hold.hold(cycles)
            fn()
            torch.cuda.synchronize()

    return profiler_events(held_calls)


def _order(names: list[str], round_index: int) -> list[str]:
    # ABBA ordering: each callable runs first as often as last, cancelling position effects (clock ramps, queue state).
    return names if round_index % 2 == 0 else names[::-1]


def _no_hook(name: str) -> None:
    return None


def time_cuda(fns: dict[str, Callable[[], Any]], settings: TimingSettings, flusher: L2Flusher | None,
              before: Callable[[str], None] = _no_hook, after: Callable[[str], None] = _no_hook,
              hold: LaunchHold | None = None) -> dict[str, list[float]]:
    """Interleaved CUDA-event timing of zero-argument callables on the current stream; per-call ms samples.
    `before(name)` runs ahead of each sample's hold and L2 flush and `after(name)` behind its end event: both untimed.
    `hold`: queued ahead of every sample when `settings.hold_launches` (sized from the host time of warm-up calls)."""
    import torch

    names = list(fns)
    torch.cuda.synchronize()
    # Warm-up: count and time, so lazy initialisation, autotuning and clock ramp-up stay out of the samples.
    start_wall = time.perf_counter()
    done = 0
    host_ms: dict[str, list[float]] = {name: [] for name in names}  # time the host takes to issue one call
    while done < settings.warmup or (time.perf_counter() - start_wall) * 1e3 < settings.warmup_min_ms:
        for name in names:
            issued = time.perf_counter()
            fns[name]()
            host_ms[name].append((time.perf_counter() - issued) * 1e3)
        done += 1
        if done % 8 == 0 or done == 1:
            torch.cuda.synchronize()
        elapsed_s = time.perf_counter() - start_wall
        if (done >= 10 * max(settings.warmup, 1) and done > 1000) or elapsed_s > settings.budget_s / 4:
            break  # slow kernels: a quarter of the budget is warm-up enough
    torch.cuda.synchronize()
    round_ms = (time.perf_counter() - start_wall) * 1e3 / max(done, 1)

    # Per-call estimate (no flush) to size the number of calls per event pair.
    estimate_calls = 1 if round_ms > 10 else 5
    calls = {}
    for name in names:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(estimate_calls):
            fns[name]()
        end.record()
        end.synchronize()
        estimate_ms = max(start.elapsed_time(end) / estimate_calls, 1e-4)
        per_sample = 1
        if settings.sample_min_ms > 0:
            per_sample = min(settings.max_calls_per_sample, max(1, math.ceil(settings.sample_min_ms / estimate_ms)))
        calls[name] = (per_sample, estimate_ms)

    trials = settings.trials
    if settings.min_measured_ms > 0 and settings.extra_trials_factor > 1:
        slowest = max(calls[n][0] * calls[n][1] for n in names)
        wanted = math.ceil(settings.min_measured_ms / max(slowest, 1e-6))
        trials = min(max(trials, wanted), trials * settings.extra_trials_factor)
    hold_cycles: dict[str, int] = {}
    if hold is not None and settings.hold_launches:
        hold_cycles = {name: hold.cycles(calls[name][0] * statistics.median(host_ms[name] or [0.0])) for name in names}
    hold_ms = sum(cycles / hold.cycles_per_ms for cycles in hold_cycles.values()) if hold_cycles else 0.0
    budget_trials = max(3, int(settings.budget_s * 1e3 / max(sum(c[0] * c[1] for c in calls.values()) + hold_ms + 0.05,
                                                            1e-3)))
    trials = max(1, min(trials, budget_trials))
    if hold_cycles:
        given_before = before

        def before(name: str) -> None:  # the hold goes last, right ahead of the flush and the start event
            given_before(name)
            hold.hold(hold_cycles[name])

    probe = flusher is not None and settings.flush_l2 and settings.max_flush_slowdown > 0
    rounds = _sample_rounds(fns, names, calls, 0, trials, settings, flusher, probe, before, after)
    if probe:
        rounds = _replace_slow_rounds(fns, names, calls, rounds, trials, settings, flusher, before, after)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for measured in rounds:
        for name, (ms, _flush_ms) in measured.items():
            samples[name].append(ms)
    return samples


def _sample_rounds(fns, names, calls, first_round: int, last_round: int, settings: TimingSettings, flusher, probe: bool,
                   before, after) -> list[dict[str, tuple[float, float]]]:
    """Rounds `first_round`..`last_round - 1` (ABBA order): per round, per callable, (ms per call, flush ms or nan)."""
    import torch

    rounds: list[dict[str, tuple[float, float]]] = []
    chunk = 64  # rounds queued between synchronisations: keeps the GPU fed without unbounded queues
    for first in range(first_round, last_round, chunk):
        pending = []
        for r in range(first, min(first + chunk, last_round)):
            for name in _order(names, r):
                per_sample = calls[name][0]
                before(name)
                flush_start = None
                if flusher is not None and settings.flush_l2:
                    if probe:
                        flush_start = torch.cuda.Event(enable_timing=True)
                        flush_start.record()
                    flusher.flush()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                fn = fns[name]
                start.record()
                for _ in range(per_sample):
                    fn()
                end.record()
                after(name)
                pending.append((r, name, flush_start, start, end, per_sample))
        torch.cuda.synchronize()
        for r, name, flush_start, start, end, per_sample in pending:
            if not rounds or rounds[-1]["_round"] != r:
                rounds.append({"_round": r})
            flush_ms = flush_start.elapsed_time(start) if flush_start is not None else math.nan
            rounds[-1][name] = (start.elapsed_time(end) / per_sample, flush_ms)
    for measured in rounds:
        del measured["_round"]
    return rounds


def _replace_slow_rounds(fns, names, calls, rounds, trials: int, settings: TimingSettings, flusher, before, after):
    """Rounds whose slowest flush exceeds `max_flush_slowdown` x the fastest flush of this process ran on a slowed
    GPU: run more rounds (up to 4x the trials or a quarter of the budget) and keep the good ones. Where fewer than half
    the trials come out good, the GPU was slow throughout: every round is kept, as measured."""
    def slowest_flush(measured: dict) -> float:
        return max(flush_ms for _ms, flush_ms in measured.values())

    flushes = sorted(flush_ms for measured in rounds for _ms, flush_ms in measured.values() if flush_ms == flush_ms)
    fastest_ms = getattr(flusher, "fastest_ms", math.inf)
    if flushes:
        fastest_ms = min(fastest_ms, flushes[len(flushes) // 10])  # 10th percentile: no lone outlier
        flusher.fastest_ms = fastest_ms

    def is_good(measured: dict) -> bool:
        return slowest_flush(measured) <= fastest_ms * settings.max_flush_slowdown

    good = [measured for measured in rounds if is_good(measured)]
    started = time.perf_counter()
    extra_rounds = 0
    while len(good) < trials and extra_rounds < 4 * trials and time.perf_counter() - started < settings.budget_s / 4:
        batch = min(trials - len(good), 64)
        more = _sample_rounds(fns, names, calls, trials + extra_rounds, trials + extra_rounds + batch, settings,
                              flusher, True, before, after)
        extra_rounds += batch
        good += [measured for measured in more if is_good(measured)]
    return good if len(good) >= max(3, trials // 2) else rounds


def time_cpu(fns: dict[str, Callable[[], Any]], settings: TimingSettings, before: Callable[[str], None] = _no_hook,
             after: Callable[[str], None] = _no_hook, reserve_bytes: int = 0) -> dict[str, list[float]]:
    """Interleaved timing for CPU mode on the host clock (`HostClock`: time this thread waited for a CPU taken by other
    processes is left out); stops early at the wall budget (at least 3 samples). `reserve_bytes`: memory made ready
    (`reserve_touched_memory`) before the first call, about what every timed call's outputs together take."""
    names = list(fns)
    keep_freed_memory()
    reserve_touched_memory(reserve_bytes)
    for _ in range(max(1, min(settings.warmup, 3))):
        for name in names:
            fns[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    began = time.perf_counter()
    with HostClock() as clock:
        for r in range(settings.trials):
            for name in _order(names, r):
                before(name)
                samples[name].append(clock.measure_ms(fns[name]))
                after(name)
            if r >= 2 and time.perf_counter() - began > settings.budget_s:
                break
    return samples


class HostClock:
    """Milliseconds one call takes on a shared CPU: wall time less the time the calling thread sat runnable on a run
    queue while other processes had the cores (Linux schedstat run_delay), but never less than the CPU time every thread
    of this process spent (so work moved into extra threads still counts). Time spent blocked (waiting on another
    process, a pipe, a sleep) stays in. Without /proc/thread-self/schedstat it is the plain wall clock.

    Why: on a shared 2-core machine a ReLU call of 0.3 ms was measured at 8-40 ms whenever the timing thread was
    preempted (up to half the samples under a load of 9), so medians of reference and candidate fell on different
    sides of that split and identical work measured 0.3-7x."""

    def __init__(self, schedstat_path: str = "/proc/thread-self/schedstat"):
        self.schedstat_path = schedstat_path
        self.fd: int | None = None

    def __enter__(self) -> "HostClock":
        import os

        try:
            self.fd = os.open(self.schedstat_path, os.O_RDONLY)
            self._run_delay_ns()
        except (OSError, ValueError, IndexError):
            self.close()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        import os

        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def _run_delay_ns(self) -> int:
        import os

        # "<ns on a CPU> <ns runnable but waiting for one> <timeslices>"; pread from 0 re-reads the current figures.
        return int(os.pread(self.fd, 128, 0).split()[1])

    def measure_ms(self, fn: Callable[[], Any]) -> float:
        if self.fd is None:
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e3
        delay0 = self._run_delay_ns()
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        cpu1 = time.process_time()
        delay1 = self._run_delay_ns()
        waited_s = (delay1 - delay0) / 1e9
        return max((t1 - t0) - waited_s, cpu1 - cpu0, 0.0) * 1e3


_MALLOPT_APPLIED = False
MAX_RESERVE_BYTES = 1 << 30


def keep_freed_memory() -> bool:
    """CPU mode: glibc keeps memory freed by this process instead of handing it back to the kernel (no trimming, no
    per-allocation mmap up to 1 GiB), so a freed output block is reused without page faults. Why: a 4 MiB output on
    fresh pages costs 1024 minor faults (~1-2.5 ms here) against ~0.3 ms of ReLU, and whether a call got fresh pages
    depended on the other callable: a candidate that keeps every output (a memo) made the reference's next allocation
    fault. Once per process; False where this is not glibc."""
    global _MALLOPT_APPLIED
    if _MALLOPT_APPLIED:
        return True
    try:
        mallopt = _libc().mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    ok = all(mallopt(option, value) == 1 for option, value in (
        (m_trim_threshold, 2**31 - 1), (m_mmap_threshold, 2**30)))
    _MALLOPT_APPLIED = ok
    return ok


@functools.lru_cache(maxsize=1)
def _libc() -> Any:
    """This process's C library, looked up once: find_library runs ldconfig in a subprocess, ~1 ms a call, and the
    CPU timing reserved memory before every reference batch (6 ms a task on a 2-core host)."""
    import ctypes
    import ctypes.util

    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


def _top_heap_bytes(libc: Any) -> int:
    """Bytes free at the top of the main heap, in one piece (glibc mallinfo2 keepcost), 0 where mallinfo2 is missing
    (glibc < 2.33). Not every free byte (fordblks): with a batch's outputs or a kept copy alive, the free bytes lie in
    pieces smaller than the next large allocation, which then grows the heap onto fresh pages. Counted that way, a
    fresh runner's projection of six 1 MiB outputs took 1280 page faults and 15 ms, against 1.2 ms once warm."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                         "fsmblks", "uordblks", "fordblks", "keepcost")]

    try:
        libc.mallinfo2.restype = MallInfo2
        return int(libc.mallinfo2().keepcost)
    except AttributeError:
        return 0


def reserve_touched_memory(size_bytes: int) -> bool:
    """Allocate, write and free `size_bytes` (at most 1 GiB) so that, with `keep_freed_memory`, the next allocations
    of this process reuse pages that are already mapped. Why: a candidate that keeps each output it returns (a memo)
    takes the block the reference has just freed, and the reference's next output then lands on fresh pages: 1024 page
    faults per 4 MiB call, measured as the reference being 3x slower (hack_cache_by_version, CPU). With the reserve
    nobody faults while it lasts; a candidate that keeps more than it is paying for its own pages first."""
    import ctypes

    size_bytes = min(int(size_bytes), MAX_RESERVE_BYTES)
    if size_bytes <= 0 or not _MALLOPT_APPLIED:
        return False
    libc = _libc()
    # Freed memory stays mapped (keep_freed_memory): touch only what the heap's free top falls short of (writing
    # 1 GiB again costs ~0.85 s on the shared VM).
    size_bytes -= _top_heap_bytes(libc)
    if size_bytes <= 0:
        return True
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    block = libc.malloc(size_bytes)
    if not block:
        return False
    ctypes.memset(block, 1, size_bytes)
    libc.free(block)
    return True


def synchronized_wall_ms(fn: Callable[[], Any], calls: int, cuda: bool) -> tuple[float, float]:
    """(wall ms per call with a device-wide synchronize around the whole batch, host ms per call to issue them).

    Device-wide synchronisation waits for every stream, so work a candidate hides on a side stream or behind an
    event it never waits for shows up here but not in the event timing of the current stream."""
    import torch

    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    issued = time.perf_counter()
    if cuda:
        torch.cuda.synchronize()
    t1 = time.perf_counter()
    return (t1 - t0) * 1e3 / calls, (issued - t0) * 1e3 / calls


FRESH_VALUE_SETS = 1 << 30  # every timed call gets new values (judge.nudged_values), however many calls there are


class RotatingInputs:
    """Fresh input values for every timed call: `buffers` input sets take turns, each refilled before its call from
    the next value set (at least one more set than buffers, so buffer and values never pair the same way twice in a
    row). A cache keyed on pointers, versions, ids or shapes then returns a stale result, which the output checks
    catch, and it buys no speed. Refills run outside the timed region.

    With `make_values` (set index -> values, deterministic), sets beyond `value_sets` are made when their turn comes,
    up to `fresh_sets` distinct sets: every timed call up to that many gets values no call had before, so a cache keyed
    on the content (a sum, a few sampled elements) that hands back a copy of its answer misses too. Both modes use this
    (with nudged sets): with 3 sets going round, such a cache measured 4.6x on a 192x192 matmul and was judged correct."""

    def __init__(self, value_sets: list[list], buffer_count: int,
                 make_values: Callable[[int], list] | None = None, fresh_sets: int = 0):
        import torch

        self.value_sets = value_sets
        self.make_values = make_values
        self.set_count = max(len(value_sets), fresh_sets if make_values is not None else 0)
        self.buffers = [[v.clone() if isinstance(v, torch.Tensor) else v for v in value_sets[0]]
                        for _ in range(max(1, min(buffer_count, self.set_count - 1)))]
        self.calls = 0
        self.current = self.buffers[0]
        self.current_values = 0  # index of the value set `current` holds

    def values(self, index: int) -> list:
        """Value set `index`, as given or made again (the same values every time)."""
        if index < len(self.value_sets):
            return self.value_sets[index]
        return self.make_values(index)

    def advance(self) -> None:
        import torch

        buffer = self.buffers[self.calls % len(self.buffers)]
        values = self.calls % self.set_count
        with torch.no_grad():
            for target, source in zip(buffer, self.values(values)):
                if isinstance(target, torch.Tensor):
                    target.copy_(source)
        self.current, self.current_values = buffer, values
        self.calls += 1


def rotation_sizes(input_bytes: int, budget_bytes: int = 2 * 2**30) -> tuple[int, int]:
    """(value sets, buffers) for timing: 3 value sets in 2 buffers, fewer where the inputs are huge (at least 2 value
    sets in 1 buffer, whose values and version then still change on every call)."""
    if input_bytes * 5 <= budget_bytes:
        return 3, 2
    return 2, 1


# ---- CPU placement for timing under load --------------------------------------------------------------------------
# A launch-bound kernel (tens of µs) is timed partly on the host: when enqueueing its launches takes longer than the
# GPU needs to run them, the event pair measures the host thread. A compile worker sharing that thread's core, or its
# SMT sibling, stretches the reference's several launches more than a fused candidate's one, and the speedup drifts.
# So GPU evaluation processes get physical cores of their own and compile (and CPU-mode) workers get the rest.
# No raised priority: candidate code runs in the runner and would inherit it, then could leave its cores.

# "1": pin GPU slots to reserved cores. Off by default: on the H100 host, under 16 g++ builds, speedups agreed with a
# quiet run for 89% of kernels unpinned but 33-44% pinned to the 2 reserved cores (tests/bench/results/h100/).
RESERVE_ENV = "KRL_TIMING_RESERVE"
PLACEMENT_ENV = "KRL_WORKER_CPUS"  # set by the pool per worker, applied and removed at the worker's entry
DEVICE_SLOTS_ENV = "KRL_WORKER_DEVICE_SLOTS"  # set by the pool: the judges sharing a GPU (slot/timing_phase.py)


def device_slots() -> int:
    """How many judges share this process's GPU (DEVICE_SLOTS_ENV); 1 where unset or unreadable."""
    import os

    try:
        return max(1, int(os.environ.get(DEVICE_SLOTS_ENV, "1")))
    except ValueError:
        return 1


def _available_cpus() -> list[int]:
    import os

    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def parse_cpu_list(text: str) -> set[int]:
    """"0-3,8,10-11" -> {0, 1, 2, 3, 8, 10, 11} (the kernel's cpulist format); empty or malformed -> empty set."""
    cpus: set[int] = set()
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            first, _, last = part.partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    except ValueError:
        return set()
    return cpus


def format_cpu_list(cpus: set[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def physical_cores(cpus: list[int] | None = None, siblings: dict[int, set[int]] | None = None) -> list[list[int]]:
    """Logical CPUs grouped by physical core (SMT siblings together), ordered by their lowest CPU. `siblings` maps a
    CPU to its core's CPUs; read from /sys when not given, each CPU its own core where /sys says nothing."""
    cpus = sorted(cpus if cpus is not None else _available_cpus())
    groups: dict[tuple[int, ...], list[int]] = {}
    for cpu in cpus:
        if siblings is not None:
            mates = siblings.get(cpu, {cpu})
        else:
            try:
                with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as handle:
                    mates = parse_cpu_list(handle.read()) or {cpu}
            except OSError:
                mates = {cpu}
        groups.setdefault(tuple(sorted(mates)), []).append(cpu)
    return sorted(groups.values(), key=lambda group: group[0])


def reserved_cores(gpu_devices: int, cpus: list[int] | None = None,
                   siblings: dict[int, set[int]] | None = None) -> list[set[int]]:
    """Per GPU device (by position), the logical CPUs kept for its evaluation processes: the highest physical cores,
    two per device (the runner that times, and the spare runner warming up beside it) where at least two cores stay
    for everything else, else one, else none (empty list: nothing is pinned)."""
    cores = physical_cores(cpus, siblings)
    for per_device in (2, 1):
        kept = gpu_devices * per_device
        if gpu_devices > 0 and len(cores) >= kept + 2:
            tail = cores[-kept:]
            return [{cpu for core in tail[d * per_device:(d + 1) * per_device] for cpu in core}
                    for d in range(gpu_devices)]
    return []


def worker_cpus(role: str, device: str, devices: list[str], cpus: list[int] | None = None,
                siblings: dict[int, set[int]] | None = None) -> set[int]:
    """The CPUs a pool worker of `role` ("eval" or "compile") on `device` runs on, given the pool's `devices`: its
    device's reserved cores for a GPU evaluation slot, every other core for compile and CPU-mode workers. Empty: leave
    it unpinned (no GPU, too few cores, or $KRL_TIMING_RESERVE not "1")."""
    import os

    gpus = [d for d in devices if d.startswith("cuda")]
    if os.environ.get(RESERVE_ENV, "0").strip() != "1" or not gpus:
        return set()
    everything = set(cpus if cpus is not None else _available_cpus())
    reserved = reserved_cores(len(gpus), sorted(everything), siblings)
    if not reserved:
        return set()
    if role == "eval" and device in gpus:
        return reserved[gpus.index(device)]
    return everything - set().union(*reserved)


def placement_env(role: str, device: str, devices: list[str]) -> dict[str, str]:
    """Environment entries the pool gives a worker it spawns so that the worker pins itself at entry."""
    cpus = worker_cpus(role, device, devices)
    return {PLACEMENT_ENV: format_cpu_list(cpus)} if cpus else {}


def apply_placement() -> bool:
    """At a pool worker's entry: pin this process to $KRL_WORKER_CPUS (and remove it from the environment). Its
    children (zygote, runners, compilers) inherit the affinity."""
    import os

    return pin_current_process(parse_cpu_list(os.environ.pop(PLACEMENT_ENV, "")))


def pin_current_process(cpus: set[int]) -> bool:
    """Restrict the calling thread, and every thread and process it starts afterwards, to `cpus` (call it at entry,
    before threads exist); False where the platform or the set does not allow it."""
    import os

    if not cpus:
        return False
    try:
        os.sched_setaffinity(0, cpus)
        return True
    except (AttributeError, OSError, ValueError):
        return False
