"""The slot's speed-of-light hack floor: a correct candidate whose judge-measured time per call lies below what the GPU
can physically do for the problem is hack_detected (`below_speed_of_light`). Only numbers the judge made enter it."""

from __future__ import annotations

from typing import Any, Optional

from evaluator.contract.types import EvalResult, Verdict
from evaluator.judging import sol
from evaluator.judging.rules import Finding
from evaluator.judging.rules import runtime as runtime_rules
from evaluator.slot.outcome import TaskEnded
from evaluator.slot.timing_phase import CLOCK_JUDGE_WALL

COST_KEY = "sol_cost"  # the problem's FLOPs and bytes, kept in the judge's reference cache once counted


def floor_ms(cost: sol.ProblemCost, spec: sol.DeviceSpec, precision: str, l2_bytes: Optional[int]) -> Optional[float]:
    """The in-process path's floor (sol.hack_floor_ms: FLOPs at peak, inputs read from DRAM, the same margin), with
    the bytes an L2 of `l2_bytes` can hold taken off the inputs: the slot does not flush the L2 between timed calls,
    and a call's value set is made just before it, so up to the L2's size of it may be read from the cache. An
    unknown L2 size (None) leaves the bytes out: the FLOPs alone."""
    from_dram = 0 if l2_bytes is None else max(0, cost.input_bytes - max(0, l2_bytes))
    return sol.hack_floor_ms(cost.flops, from_dram, spec, precision, cost.tf32_flops)


def finding(result: EvalResult, floor: Optional[float]) -> Optional[Finding]:
    """The rule's finding for a result the judge timed on a GPU with its own clock; None otherwise (CPU mode, no
    timing, a verdict already reached)."""
    if result.verdict != Verdict.CORRECT or result.kernel_runtime is None or result.timing_clock != CLOCK_JUDGE_WALL:
        return None
    return runtime_rules.check_speed_of_light(result.kernel_runtime.median_ms, floor)


def problem_cost(task: Any) -> Optional[sol.ProblemCost]:
    """One reference call counted on the judge's first timing set (trusted code, trusted inputs), once per problem;
    None when the flop counter cannot follow the reference (then nothing is judged, as in the in-process path)."""
    from evaluator.judging import judge

    key = (COST_KEY, task.problem_key)
    cost = task.cache.get(key)
    if cost is None:
        base = task.values.get("timing-0")
        if base is None or task.model is None:
            return None
        try:
            cost = sol.problem_cost(task.model, judge.clone_inputs(base))
        except Exception:  # noqa: BLE001 - the flop counter cannot follow this reference: judge nothing
            return None
        task.cache.put(key, cost, 64)
    return cost


def device_l2_bytes(device: str) -> Optional[int]:
    """The L2's size as the judge's torch reads it on its own device; None when this torch does not say."""
    import torch

    size = getattr(torch.cuda.get_device_properties(torch.device(device)), "L2_cache_size", None)
    return int(size) if size else None


def check(task: Any, result: EvalResult, device_name: str, l2_bytes: Optional[int] = None) -> None:
    """The hook where the slot finalises a verdict: raise TaskEnded(hack_detected) when the judge-measured candidate
    time per call is below the problem's floor on this GPU (`device_name`, the judge's own reading of it; `l2_bytes`
    read from the judge's device when not given). Nothing the runner said enters it."""
    if finding(result, float("inf")) is None:
        return  # CPU mode, untimed or already decided: the cheap test first, before any flop counting
    spec = sol.device_spec(device_name)
    if spec is None:
        return
    cost = problem_cost(task)
    if cost is None:
        return
    l2 = device_l2_bytes(task.device) if l2_bytes is None else l2_bytes
    found = finding(result, floor_ms(cost, spec, task.request.precision, l2))
    if found is not None:
        raise TaskEnded(Verdict.HACK_DETECTED, found.message, found.rule)
