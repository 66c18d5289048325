"""KernelBench's reference timed in the task's own runner before its candidate loads (issue 24), a diagnostic turned on
by KRL_WORKER_REFERENCE_FIRST=1: recorded beside the judge's own figure, never charged.

Why it exists: KernelBench's convention counts host launch work the L2 flush does not hide, so a launch-bound call's
figure depends on the process that issues it. Timed in the long-lived judge, a small GEMM fusion's reference read
2-3.5x KernelBench's own median where the candidate's runner matched it (H100, session 13), so session 14 charged this
figure. Session 15 found those readings were spikes (other processes' GPU work in a few calls' windows): with spiked
calls left out of both sides' means the judge's own reference agreed better (kernelbench_phase). A runner that has run no
candidate code yet can be believed, as its clean round trip already is (slot/task_driver.py clean_round_trip): the
judge reads its answer before the `task` order, so nothing the candidate does later can reach it.

Protocol (docs/slot.md), after the pings and before `task`:
  `reference` {request, warmup}  -> `reference_ready`: the reference model and one input set built, warmed, untimed
  `time_reference` {calls}       -> `reference_timed` {events_ms}: KernelBench's event timing, the device held
An empty `events_ms` means the runner could not time it (nothing is recorded)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Optional

from evaluator.slot.evidence import number

ORDERS = ("reference", "time_reference")
ENV = "KRL_WORKER_REFERENCE_FIRST"  # "1": timed first and recorded (GPU and CPU mode); default: not timed
MIN_CALLS = 3
MAX_CALLS = 1024
BUDGET_S = 2.0  # each order's calls stop past this (at least one): the timed one holds the device exclusive


class _Discarded(list):
    """kernelbench_timing.event_times_ms keeps each output it is given a list for; here none needs keeping (a
    256 MiB output a call, a hundred calls, would not fit)."""

    def append(self, item: Any) -> None:
        pass


class ReferenceFirst:
    """The runner's side: one problem's reference, built and timed before any candidate code runs here."""

    def __init__(self, ctx: Any):
        self.ctx = ctx
        self.call: Any = None  # the reference on its input set, once built and warmed (None: not timed first)
        self.flush: Any = None

    def answer(self, order: dict[str, Any]) -> dict[str, Any]:
        if order.get("type") == "reference":
            try:
                self._build(order["request"], int(order.get("warmup", MIN_CALLS)))
            except Exception as exc:  # noqa: BLE001 - a problem that fails here fails in the judge too; it decides
                self.call = None
                print(f"krl runner: the reference could not be timed first: {type(exc).__name__}: {exc}"[:300],
                      file=sys.stderr)
            return {"type": "reference_ready"}
        events: list[float] = []
        if self.call is not None:
            try:
                events = self._timed(max(MIN_CALLS, min(MAX_CALLS, int(order.get("calls", MIN_CALLS)))))
            except Exception as exc:  # noqa: BLE001
                print(f"krl runner: timing the reference first failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return {"type": "reference_timed", "events_ms": events}

    def _build(self, request_fields: dict[str, Any], warmup: int) -> None:
        """The reference model as the judge builds it (seeded, on the device, the request's precision) and one input
        set, as KernelBench times it; `warmup` calls untimed, so cuBLAS's handles and the allocator are warm."""
        from evaluator.contract.types import EvalRequest
        from evaluator.judging import judge
        from evaluator.judging.reference import load_reference

        request = EvalRequest.from_dict(request_fields)
        reference = load_reference(request.reference_source, request.size_overrides)
        device = self.ctx.device
        model = judge.build_reference_model(reference, request.seed, device, request.precision)
        values = judge.make_inputs(reference, request.seed, device, request.precision)
        self.call = lambda: model(*values)
        if self.ctx.is_cuda:
            from evaluator.judging.kernelbench_timing import KernelBenchFlush

            self.flush = KernelBenchFlush(device)
        self._timed(max(1, warmup))

    def _timed(self, calls: int) -> list[float]:
        """Milliseconds of each call: on a GPU KernelBench's events (kernelbench_timing.event_times_ms: synchronise,
        flush, events around the call, synchronise, autograd on); on a CPU the host clock (recorded only). At least one
        call, and no call started past BUDGET_S: a slow reference must not keep the runner from its task (the judge
        waits for these orders within the task's start deadline, and a runner that misses it is a failure of ours)."""
        started = time.perf_counter()
        times: list[float] = []
        while len(times) < calls and (not times or time.perf_counter() - started < BUDGET_S):
            times += self._one_call()
        return times

    def _one_call(self) -> list[float]:
        if self.ctx.is_cuda:
            from evaluator.judging.kernelbench_timing import event_times_ms

            return event_times_ms(lambda _: self.call(), [None], self.flush.flush, _Discarded())
        begun = time.perf_counter()
        self.call()
        return [(time.perf_counter() - begun) * 1e3]

    def release(self) -> None:
        """Everything of the reference let go before the candidate loads: its memory is the candidate's to use."""
        self.call = self.flush = None
        if self.ctx.is_cuda:
            import gc

            import torch

            gc.collect()
            torch.cuda.synchronize()
            torch.cuda.empty_cache()  # back to the device, not kept reserved in this process beside the other slots


# ---------------------------------------------------------------- the judge's side

def wanted(request: Any) -> bool:
    """Whether this task's reference is timed first in its runner, a diagnostic that is recorded and never charged
    (kernelbench_phase._record_reference_first): ENV=1 and KernelBench's figure asked for and timed. Off by default, since it
    costs a GPU task ~0.1 s and a window of the device's exclusive hold."""
    if os.environ.get(ENV, "").strip() != "1" or not request.measure_timing:
        return False
    return bool(getattr(request, "kernelbench_timing", False))


def calls_for(request: Any) -> tuple[int, int]:
    """(warm-up, timed) calls: KernelBench's trial count (the request's timing_trials), and a warm-up as long as the
    candidate's unused first KernelBench round (one of kernelbench_phase.ROUNDS)."""
    from evaluator.slot.kernelbench_phase import ROUNDS

    timed = max(MIN_CALLS, min(MAX_CALLS, int(request.timing_trials)))
    return max(MIN_CALLS, -(-timed // ROUNDS)), timed


def time_reference_first(driver: Any, request: Any, hold: Any, deadline: float) -> Optional[list[float]]:
    """The runner's event times of the reference, before `task`; None when it could not time it. `hold()`: a context
    that holds the device exclusive for the timed order (nothing on a CPU). Deadline and protocol errors propagate:
    before `task` they are the evaluator's (the task is retried on a fresh runner)."""
    warmup, timed = calls_for(request)
    driver.order({"type": "reference", "request": request.to_dict(), "warmup": warmup}, "reference_ready",
                 deadline=deadline)
    with hold():
        answer = driver.order({"type": "time_reference", "calls": timed}, "reference_timed", deadline=deadline)
    events = answer.get("events_ms")
    if not isinstance(events, list) or not events or len(events) > timed:
        return None
    values = [number(v) for v in events]  # an honest runner's mistake is no breach: the judge's own figure instead
    return values if all(v is not None and v > 0 for v in values) else None
