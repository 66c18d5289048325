"""What the pool answers on its own, without a slot's verdict: a published build that decides the result, and the
results of a worker the pool saw die (timeout, memory, crash). The wording is what the model reads as feedback."""

from __future__ import annotations

from typing import Optional

from evaluator.build.records import CompileRecord
from evaluator.contract.types import EvalRequest, EvalResult, Verdict
from evaluator.isolation.exits import crash_message, crash_report, memory_kill_message, tail
from evaluator.local.records import KillReason, Role, Task, Worker


def build_verdict(request: EvalRequest, record: CompileRecord, cpu_mode: bool) -> Optional[EvalResult]:
    """The result a published build decides on its own: it failed (compile_error), or it built but CPU mode cannot
    run CUDA kernels (runtime_error). None: it goes on to be evaluated."""
    common = {"request_id": request.request_id, "problem_id": request.problem_id,
              "phase_times_s": {"compile": record.seconds}, "cache_hits": ["compile"] if record.cache_hit else []}
    if not record.ok:
        return EvalResult(verdict=Verdict.COMPILE_ERROR, compiled=False,
                          error_message=record.error_message or "compilation failed", **common)
    if cpu_mode:  # a published record always lists its builds, and none of them can run without a GPU
        return EvalResult(verdict=Verdict.RUNTIME_ERROR, compiled=True,
                          error_message="compiled, but CUDA kernels cannot run in CPU mode (no GPU).", **common)
    return None


def _compiled(task: Task, worker: Worker) -> bool:
    return worker.role == Role.EVAL and task.build is not None and task.build.ok


def timeout_result(task: Task, worker: Worker, elapsed_s: float) -> EvalResult:
    phase = "compilation" if worker.role == Role.COMPILE else "evaluation"
    return EvalResult(
        request_id=task.request.request_id, problem_id=task.request.problem_id, verdict=Verdict.TIMEOUT,
        compiled=_compiled(task, worker),
        error_message=f"The {phase} did not finish within {worker.timeout_limit_s:.0f} s and was stopped.",
        phase_times_s={"total": elapsed_s}, attempts=task.attempts, worker_id=worker.worker_id,
    )


def memory_result(task: Task, worker: Worker, limit_bytes: int, elapsed_s: float) -> EvalResult:
    return EvalResult(
        request_id=task.request.request_id, problem_id=task.request.problem_id, verdict=Verdict.RUNTIME_ERROR,
        compiled=task.build is not None and task.build.ok,
        error_message=memory_kill_message(worker.memory_used, limit_bytes),
        phase_times_s={"total": elapsed_s}, attempts=task.attempts, worker_id=worker.worker_id,
    )


def crash_result(task: Task, worker: Worker, cause: str, elapsed_s: float) -> EvalResult:
    """The candidate's process died while it ran: a crash, with the candidate's own frames from its stderr."""
    report = crash_report(tail(worker.err_path, max_lines=40, max_chars=8000), worker.workdir)
    if worker.kill_reason == KillReason.CHANNEL:
        cause = "the candidate closed the worker's result channel, so the worker was killed"
    message = crash_message("compiling" if worker.role == Role.COMPILE else "running", cause, report)
    return EvalResult(
        request_id=task.request.request_id, problem_id=task.request.problem_id, verdict=Verdict.CRASHED,
        compiled=_compiled(task, worker), error_message=message[-2000:], phase_times_s={"total": elapsed_s},
        attempts=task.attempts, worker_id=worker.worker_id,
    )
