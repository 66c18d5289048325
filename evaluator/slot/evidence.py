"""What a runner says, read as evidence: each answer checked against the order it answers, its fields bounded. A
runner may admit a fault of its candidate (lowering the reward); it can never claim a pass, a speed or our failure."""

from __future__ import annotations

from typing import Any, Optional

from evaluator.contract.types import EvalRequest, Verdict
from evaluator.slot.outcome import ProtocolBreach, TaskEnded

# Verdicts a runner may report about its own candidate: each only lowers the reward. Never correct, timeout,
# crashed-as-ours or anything the judge alone observes.
ADMISSIBLE = {Verdict.COMPILE_ERROR, Verdict.RUNTIME_ERROR, Verdict.FORMAT_ERROR, Verdict.HACK_DETECTED}
MAX_TEXT = 2000
# The fields each answer may carry besides its type and name (slot/order_loop.py, slot/reference_first.py); any other
# field on it breaks the protocol. triton_launchers is checked where it is built (build/triton_launchers.py).
ANSWER_FIELDS = {
    "evidence": frozenset({"own_kernel_time_fraction", "triton_launchers"}),
    "handed": frozenset({"projections", "digests"}),
    "ran": frozenset({"events_ms"}),
    "reference_timed": frozenset({"events_ms"}),
    "staged": frozenset({"gate"}),
}


def text(value: Any, limit: int = MAX_TEXT) -> str:
    return value[:limit] if isinstance(value, str) else ""


def number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:  # a JSON integer beyond any float: float() would raise inside the judge
        return None
    return value if value == value and abs(value) != float("inf") else None


def admitted_failure(answer: dict[str, Any]) -> TaskEnded:
    """A 'failed' answer as the verdict it admits; anything else it could say breaks the protocol."""
    try:
        verdict = Verdict(answer.get("verdict"))
    except ValueError:
        return ProtocolBreach("a failure with an unknown verdict")
    if verdict not in ADMISSIBLE:
        return ProtocolBreach(f"it reported its own verdict {verdict.value!r}")
    rule = text(answer.get("rule"), 100) or None if verdict == Verdict.HACK_DETECTED else None
    compiled = answer.get("compiled") if isinstance(answer.get("compiled"), bool) else None
    return TaskEnded(verdict, text(answer.get("message")) or "The candidate failed.", rule, compiled)


def check_answer(answer: dict[str, Any], expected: str, name: Optional[str] = None) -> dict[str, Any]:
    """The answer to an order of type `expected` (naming `name`, if given), or the verdict it admits, raised."""
    kind = answer.get("type")
    if kind == "failed":
        raise admitted_failure(answer)
    if kind != expected:
        raise ProtocolBreach(f"it answered {text(kind, 40)!r} where the judge waited for {expected!r}")
    if name is not None and answer.get("name") != name:
        raise ProtocolBreach(f"it answered for {text(answer.get('name'), 40)!r}, not {name!r}")
    extra = set(answer) - {"type", "name"} - ANSWER_FIELDS.get(expected, frozenset())
    if extra:
        raise ProtocolBreach(f"its answer carried fields nobody asked for ({', '.join(sorted(extra)[:4])})")
    values = answer.get("events_ms")  # a list of numbers the judge converts with float()
    if isinstance(values, list) and any(type(v) is int and number(v) is None for v in values):
        raise ProtocolBreach("its events_ms held an integer beyond any float")
    return answer


def kernel_fraction(answer: dict[str, Any], request: Optional[EvalRequest] = None) -> Optional[float]:
    """The share of the candidate's GPU time in its own kernels, as its runner's profiler measured it: reported by a
    process that ran candidate code, so forgeable, and never judged (only core/reward.py's lazy rule reads it). The
    judge cannot measure it (a profiler sees only its own process) and bounds it by what it reads itself in the
    request: the torch backend has no kernels of its own, so no share (an honest runner reports none); a source in
    which it finds no Triton or CUDA kernel reports at most 0."""
    from evaluator.judging.rules.static import own_kernel_names

    value = number(answer.get("own_kernel_time_fraction"))
    if value is None:
        return None
    if request is not None:
        if request.backend not in ("triton", "cuda"):
            return None
        if not own_kernel_names(request.candidate_source):
            return 0.0
    return min(1.0, max(0.0, value))
