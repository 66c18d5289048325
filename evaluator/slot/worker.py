"""What happens inside one evaluator worker process for one request: load, check correctness, time, detect hacks.
The pool owns processes, timeouts and crashes; this module never raises for a candidate's faults."""

from __future__ import annotations

import socket
import time
from typing import Any

from evaluator.judging import timing
from evaluator.contract.types import EvalRequest, EvalResult, Verdict
from evaluator.slot.run_state import RunState, note_broken_context, record_failure
from evaluator.slot.worker_session import TaskSession
from evaluator.slot.worker_setup import (  # noqa: F401 - public here too
    WorkerContext, default_timing_settings, prepare_runner, prepare_worker)


def evaluate_in_process(request: EvalRequest, ctx: WorkerContext, prebuilt: dict | None = None) -> EvalResult:
    """Evaluate one request in this process. Returns a verdict for every candidate fault; never raises for them."""
    import torch

    started = time.perf_counter()
    result = EvalResult(
        request_id=request.request_id,
        problem_id=request.problem_id,
        verdict=Verdict.RUNTIME_ERROR,
        device_name=ctx.device_name,
        gpu_name=ctx.device_name if ctx.is_cuda else "",
        node=socket.gethostname(),
        timing_clock=timing.CLOCK_CUDA if ctx.is_cuda else timing.CLOCK_MONOTONIC,
        correctness_trials_total=request.correctness_trials,
    )
    if prebuilt and prebuilt.get("cache_hit"):
        result.cache_hits.append("compile")
    if prebuilt and prebuilt.get("seconds") is not None:
        result.phase_times_s["compile"] = round(float(prebuilt["seconds"]), 6)
    state = RunState(request, ctx, result, torch)
    try:
        with torch.no_grad():
            state.run(prebuilt)
        result.verdict = Verdict.CORRECT
    except BaseException as exc:  # noqa: BLE001 - a candidate can raise anything, SystemExit included
        if isinstance(exc, KeyboardInterrupt):
            raise
        record_failure(result, exc, request.candidate_source, state.candidate_path)
    finally:
        state.cleanup()
    note_broken_context(result, ctx, torch)
    ctx.requests_done += 1
    result.phase_times_s["total"] = round(time.perf_counter() - started, 6)
    return result


def open_session(request: EvalRequest, ctx: WorkerContext, prebuilt: dict | None = None) -> Any:
    """A slot runner's session for one request: these checks, one judge order at a time (evaluator/slot/)."""
    return TaskSession(request, ctx, prebuilt)


def synchronize(ctx: WorkerContext) -> None:
    """The device synchronised, as at the end of every timed order: a ping's answer costs what an order's ending does."""
    if ctx.is_cuda:
        import torch

        torch.cuda.synchronize()
