"""How one task of a slot ends, seen from the judge: a verdict the judge decided, or its own infrastructure failure; and
a timed round that does not count. The runner's misbehaviour (garbage, silence, unsolicited or out-of-order messages)
is always the candidate's fault."""

from __future__ import annotations

from typing import Any, Callable, Optional

from evaluator.contract.types import EvalRequest, EvalResult, Verdict

PROTOCOL_RULE = "judge_protocol"


class TaskEnded(Exception):
    """A verdict reached before the schedule's end (a candidate fault the judge saw, or one the runner admitted)."""

    def __init__(self, verdict: Verdict, message: str, hack_rule: Optional[str] = None,
                 compiled: Optional[bool] = None):
        super().__init__(message)
        self.verdict, self.message, self.hack_rule, self.compiled = verdict, message, hack_rule, compiled


class ProtocolBreach(TaskEnded):
    """The runner said something the judge did not ask for, in a form or order it did not ask for, or too much."""

    def __init__(self, why: str):
        super().__init__(Verdict.CRASHED,
                         f"The candidate's process broke the judge's protocol ({why}) and was stopped.")


class Interfered(Exception):
    """The runner worked while the judge timed the reference (slot/reference_watch.py): the round does not
    count."""


def timed_again_if_interfered(round_: Callable[[], Any]) -> Any:
    """`round_()`, run again while it raises Interfered (reference_watch.WatchedReference.reference_watched ends the
    task after a few)."""
    while True:
        try:
            return round_()
        except Interfered:
            continue


class RunnerGone(Exception):
    """The runner's pipe closed (it died, or closed it): a crash of the candidate once the task had started."""


class TimingContended(Exception):
    """Another CUDA context shared the reference's timed windows in too many rounds (slot/gap_probe.py): no figure can
    be taken. The judge's own observation, so an infrastructure failure, retried once by the pool."""


class SlotFailure(Exception):
    """The judge's own machinery failed (the zygote died, a runner never started): not the candidate's fault."""


def verdict_result(request: EvalRequest, verdict: Verdict, message: str, hack_rule: Optional[str] = None) -> EvalResult:
    return EvalResult(request_id=request.request_id, problem_id=request.problem_id, verdict=verdict,
                      error_message=message[-2000:], hack_rule=hack_rule,
                      correctness_trials_total=request.correctness_trials)
