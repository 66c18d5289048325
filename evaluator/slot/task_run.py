"""One task from the judge host's side: hand the task to a ready runner, run the judge's schedule, and turn how it
ended into the pool's reply. Only the judge's own observations make an infrastructure failure."""

from __future__ import annotations

from typing import Any, Callable, Optional

from evaluator.contract.types import Verdict
from evaluator.slot.device_memory import starved_by_others
from evaluator.slot import reference_first
from evaluator.slot.judge_profile import runners_profiled
from evaluator.slot.outcome import RunnerGone, SlotFailure, TaskEnded, TimingContended, verdict_result
from evaluator.slot.sol_floor import check as check_speed_of_light
from evaluator.slot.task_driver import Deadline, write_trace
from evaluator.slot.task_judge import SHARED_STEPS, Schedule

EXIT_STATUS_WAIT_S = 2.0
ROUND_TRIP_PINGS = 5


def drive_task(slot: Any, runner: Any, driver: Any, task: Any, prebuilt: Optional[dict], on_started: Callable[[], None],
               timing_factory: Callable[..., Any], start_deadline: float, device_name: str = "",
               err_path: str = "", device_lock: Any = None,
               shared_steps: frozenset[str] = SHARED_STEPS, alone: bool = False) -> dict[str, Any]:
    """`device_lock`: this GPU's lock (isolation/device_lock.py), held shared around the task's `shared_steps` (GPU
    steps outside its timing; the timing holds it exclusive); None in CPU mode. `alone`: the pool gave this task its
    device to itself (a retry after the GPU was full of others' memory), so an out-of-memory error is the candidate's."""
    import time

    request = task.request
    schedule = Schedule(task, driver, timing_factory, device_lock, shared_steps)
    result = schedule.result
    started = False
    t0 = time.monotonic()
    try:
        driver.clean_round_trip(ROUND_TRIP_PINGS, start_deadline)  # an honest order's fixed cost, before any
        # candidate code runs in this runner (a GPU timing takes it off each candidate order)
        if reference_first.wanted(request):  # KernelBench's reference, timed in this runner first
            schedule.reference_first_ms = reference_first.time_reference_first(
                driver, request, _exclusive(device_lock, start_deadline, schedule.phases, runner), start_deadline)
        order = {"type": "task", "request": request.to_dict(), "prebuilt": prebuilt}
        if runners_profiled():
            order["profile"] = True  # the benchmarks' runner profile (slot/judge_profile.py)
        driver.order(order, "started", deadline=start_deadline)
        started = True
        on_started()
        schedule.run()
        slot.kill_leftovers(runner)  # before the reply: processes the candidate left must not outlive its verdict
        check_speed_of_light(task, result, device_name)  # the judge's time below the GPU's physical floor: a hack
    except Deadline:
        slot.discard(runner)
        if not started:  # the candidate never ran, so no verdict on it: ours, retried once on a fresh runner
            return {"type": "infra", "why": f"the runner did not start the task within {time.monotonic() - t0:.0f} s"}
        slot.counters.add("timeouts")
        limit_s = driver.deadline - t0
        result = verdict_result(request, Verdict.TIMEOUT, f"The evaluation did not finish within {limit_s:.0f} s and "
                                                          "was stopped.")
    except TaskEnded as ended:
        starved = ended.verdict == Verdict.RUNTIME_ERROR and str(task.device).startswith("cuda") and not alone \
            and starved_by_others(ended.message, runner.host_pid)  # read before the runner goes
        slot.discard(runner)
        if not started:
            return {"type": "infra", "why": f"the runner misbehaved before the candidate ran: {ended.message}"}
        if starved:
            slot.counters.add("device_full")
            return {"type": "infra", "device_full": True,
                    "why": "the GPU was full of other evaluations' memory when the candidate ran out of it"}
        result.verdict, result.error_message, result.hack_rule = ended.verdict, ended.message[:2000], ended.hack_rule
        if ended.compiled is not None:
            result.compiled = ended.compiled
    except RunnerGone:
        if not started:
            slot.discard(runner)
            return {"type": "infra", "why": "the runner died before the candidate ran"}
        if driver.killed_for_memory():
            slot.discard(runner)
            slot.counters.add("memory_kills")
            result = verdict_result(request, Verdict.RUNTIME_ERROR, driver.memory_message())
        else:
            result = crashed(slot, runner, request, err_path)
    except SlotFailure as failure:
        slot.discard(runner)
        slot.counters.add("zygote_deaths")
        return {"type": "infra", "why": str(failure)}
    except TimingContended as contended:  # the judge's own view of the device (slot/gap_probe.py): not a verdict
        slot.discard(runner)
        slot.counters.add("timing_contended")
        return {"type": "infra", "why": str(contended)}
    if result.verdict != Verdict.CORRECT:
        result.speedup = None  # no speed is reported, or rewarded, without a correct result
    result.device_name = device_name
    result.gpu_name = device_name if task.device.startswith("cuda") else ""
    result.correctness_trials_total = request.correctness_trials
    result.phase_times_s.update(schedule.phases)
    write_trace(driver, request.request_id, result.phase_times_s)
    return {"type": "result", "result": result.to_dict()}


def _exclusive(lock: Any, deadline: float, phases: dict, runner: Any) -> Callable[[], Any]:
    """A context that holds the GPU exclusive for one timed window (exclusive_hold.exclusive_window); nothing on a CPU."""
    import contextlib

    from evaluator.slot.exclusive_hold import exclusive_window

    if lock is None:
        return contextlib.nullcontext
    return lambda: exclusive_window(lock, deadline, phases, runner.host_pid, "reference_first")


def crashed(slot: Any, runner: Any, request: Any, err_path: str) -> Any:
    from evaluator.isolation.exits import crash_report, describe_exit, tail

    returncode = slot.returncode_of(runner, EXIT_STATUS_WAIT_S)
    slot.discard(runner)
    slot.counters.add("crashes")
    cause = describe_exit(returncode) if returncode is not None else \
        "it died (exit status unknown: the sandbox's zygote was gone)"
    report = crash_report(tail(err_path, max_lines=40, max_chars=8000), runner.workdir or "/nonexistent") \
        if err_path else ""
    text = f"The worker process died while running the candidate: {cause}."
    if report:
        text += "\nLast lines of its stderr:\n" + report
    return verdict_result(request, Verdict.CRASHED, text)
