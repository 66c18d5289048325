"""A worker process's one-time set-up: the device, the scratch folder, the guards and the timing machinery, kept in a
WorkerContext that every evaluation of that process (in-process, or a slot runner's session) shares."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from typing import Any

from evaluator.judging import l2_persist, timing
from evaluator.judging.rules import runtime as runtime_rules


@dataclass
class WorkerContext:
    """Per-process state: device, scratch folder, pristine function identities, reference-timing cache."""

    device: str  # "cpu" or "cuda:N"
    device_name: str
    torch_version: str
    work_dir: str
    cache_dir: str = ""
    sticky_cuda_error: bool = False  # the pool retires the worker when True
    # Why this process can no longer be trusted although CUDA is fine (e.g. a candidate left threads running).
    polluted_reason: str = ""
    reference_timing_cache: dict = field(default_factory=dict)
    guard: Any = None
    launch_counter: Any = None
    flusher: Any = None
    launch_hold: Any = None
    l2_reset: Any = None  # judging/l2_persist.PersistingL2Reset, bound before any candidate runs
    timing_settings: timing.TimingSettings = field(default_factory=timing.TimingSettings)
    requests_done: int = 0
    timed_evaluations: int = 0
    baseline_cuda_bytes: int = 0
    # A runner's Triton launcher signatures, as Triton builds them (build/triton_launchers.py): reported to its judge
    triton_launchers: list = field(default_factory=list)

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def should_retire(self) -> bool:
        return self.sticky_cuda_error or bool(self.polluted_reason)


def default_timing_settings(is_cuda: bool) -> timing.TimingSettings:
    if is_cuda:
        # One call per event pair after an L2 flush, reference and candidate interleaved (ABBA). On an H200 this kept
        # the self-speedup of a 15 µs ReLU within 0.98-1.03 (40 repeats, tests/bench/bench_timing_stability.py);
        # several calls per pair were no better, and more samples (min_measured_ms=30, extra_trials_factor=10)
        # tighten it further at ~3x the timing cost.
        return timing.TimingSettings(sample_min_ms=0.0, min_measured_ms=0.0, extra_trials_factor=1, budget_s=10.0,
                                     hold_launches=os.environ.get(timing.LaunchHold.ENV, "1") != "0")
    return timing.TimingSettings(flush_l2=False, budget_s=1.5)


def prepare_worker(device: str = "cpu", work_dir: str | None = None, cache_dir: str | None = None,
                   in_process_timing: bool = True) -> WorkerContext:
    """Once per process: import torch (and triton when present), initialise the device, snapshot critical functions.
    `in_process_timing`: ready this process to time on its own (evaluate_in_process: its L2 flush buffer and a warm-up
    timing session); a slot's runner never does, the judge drives its timing (prepare_runner)."""
    import torch

    if device in ("cuda", "gpu"):
        device = "cuda:0"
    if device.startswith("cuda"):
        torch.cuda.init()
        torch.cuda.set_device(torch.device(device))
        torch.empty(1, device=device).add_(1)
        torch.cuda.synchronize()
        device_name = torch.cuda.get_device_name(torch.device(device))
    else:
        device_name = "cpu"
    try:  # importing triton once here keeps it out of the first triton task's time
        import triton  # noqa: F401
    except Exception:
        pass
    work_dir = work_dir or tempfile.mkdtemp(prefix="krl-worker-")
    ctx = WorkerContext(
        device=device,
        device_name=device_name,
        torch_version=torch.__version__,
        work_dir=work_dir,
        cache_dir=cache_dir or os.environ.get("KRL_WORKER_CACHE_DIR", "") or os.environ.get("KRL_CACHE_DIR", ""),
        timing_settings=default_timing_settings(device.startswith("cuda")),
    )
    ctx.launch_counter = runtime_rules.LaunchCounter()
    ctx.launch_counter.install()
    ctx.guard = runtime_rules.FunctionGuard()  # after the launch counter, whose wrappers are ours
    if ctx.is_cuda:
        ctx.launch_hold = timing.LaunchHold()
        ctx.l2_reset = l2_persist.PersistingL2Reset()
        if in_process_timing:
            if timing.kernel_profile_wanted():
                timing.profiler_events(lambda: None)  # CUPTI's set-up, paid here rather than in an evaluation's checks
            ctx.flusher = timing.L2Flusher(device)
            _warm_up_timing(torch, ctx)
        ctx.baseline_cuda_bytes = torch.cuda.memory_allocated()
    return ctx


def prepare_runner(device: str) -> WorkerContext:
    """A slot runner's start (slot/runner.py). Without prepare_worker's timing warm-up: a spare runner warms while other
    slots time, and that session's 200 flushed samples (100 MiB flushes, a 16 MiB ReLU) ran on the GPU inside their
    exclusive windows, which shut out only the judges' own work (H100, session 14: a 2.7 ms GEMM's reference, timed in
    its runner as the next spare warmed, read 18% slow, small GEMMs' up to 3x). Nor its 100 MiB flush buffer, three
    spares a slot. Nor CUPTI: the kernel checks attach it when they first profile (a torch candidate's runner never
    does), so the reference timed first in this runner (slot/reference_first.py) and a torch candidate's calls run
    without its per-launch callbacks (small GEMM references timed with it attached read 2-3x KernelBench's times)."""
    ctx = prepare_worker(device, in_process_timing=False)
    if ctx.is_cuda:
        from evaluator.build.triton_launchers import record_launched_signatures

        ctx.triton_launchers = record_launched_signatures()
        _import_gluon()
        _warm_hand_over(ctx.device)
    return ctx


def _warm_hand_over(device: str) -> None:
    """A timed batch's value sets and hand-over made once on a few elements: their first use in a runner (cuBLAS's
    handle for the projection's matrix-vector product, the draws', stack's and sin's kernels) took ~0.1 s of a fresh
    runner's first warm round at 8 slots on an H200, while it held the device shared (session 24). A few kernels of
    microseconds, here, in a spare's warm-up."""
    import torch

    from evaluator.judging import judge
    from evaluator.slot.output_digest import digests
    from evaluator.slot.projection import projections

    try:
        sets = judge.nudged_batch([[torch.ones(8, device=device)]], 1, 2)
        projections([values[0] for values in sets], 1)
        digests([values[0] for values in sets], 1)  # on a GPU the digest kernel's first load (built by the judge)
    except Exception:  # noqa: BLE001 - a warm-up only: the task pays for these kernels' first use instead
        pass


def _import_gluon() -> None:
    """Triton's Gluon modules, which its compiler imports at a runner's first JIT: ~40 modules compiled from source
    (no bytecode cache in the sandbox), 0.15 s of each Triton task's first trial (H200, session 23, profiled). Here, in
    a spare's warm-up, not in the zygote: a Gluon module once initialised CUDA there. Every GPU runner pays it, whatever
    its candidate's backend: its CPU before a task rose from 0.35 to 0.48 s (docs/figures.md, session 23)."""
    try:
        import triton.experimental.gluon  # noqa: F401
    except Exception:  # noqa: BLE001 - another Triton, or none
        pass


def _warm_up_timing(torch: Any, ctx: WorkerContext) -> None:
    """One timing session on a throwaway kernel, so the first real measurement of this process (which seeds the
    reference-timing cache) does not pay for cold allocator pools, event machinery and clocks."""
    x = torch.randn(2**22, device=ctx.device)
    settings = timing.TimingSettings(trials=100, warmup=10, warmup_min_ms=100.0)
    with torch.no_grad():
        timing.time_cuda({"a": lambda: torch.relu(x), "b": lambda: torch.relu(x)}, settings, ctx.flusher,
                          hold=ctx.launch_hold)
    del x
