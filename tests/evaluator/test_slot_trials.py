"""The correctness trials overlap (slot/task_judge.py Schedule.trials): the judge makes the next trial's values while
the runner runs one, yet every trial is judged, in order, through the real Evaluator in CPU mode with its sandbox."""

from __future__ import annotations

import pytest

from evaluator.contract.types import Verdict
from evaluator.isolation.sandbox import get_sandbox
from tests.evaluator.pool_support import candidate, module_evaluator, request

pytestmark = pytest.mark.skipif(get_sandbox().kind == "none", reason="no sandbox works on this machine")

evaluator = module_evaluator()

# Wrong on its third call only: the trials are its first five calls.
WRONG_THIRD = candidate("type(self).calls = getattr(type(self), 'calls', 0) + 1\n"
                        "return x.abs() if type(self).calls == 3 else x.clamp_min(0)")
# Wrong once it can see more than one trial's values in the judge's folder (read-only to it): what the overlap shows.
SEES_TWO_SETS = candidate("import os\n"
                          "folder = os.environ.get('KRL_WORKER_XFER_IN', '')\n"
                          "sets = [n for n in os.listdir(folder) if n.startswith('trial-')] if folder else []\n"
                          "return x.abs() if len(sets) > 1 else x.clamp_min(0)")


def test_a_candidate_wrong_on_one_trial_is_judged_on_all_five_in_order(evaluator):
    result = evaluator.evaluate(request(WRONG_THIRD, request_id="wrong-third", correctness_trials=5))
    assert result.verdict == Verdict.WRONG_OUTPUT, (result.verdict, result.error_message)
    assert result.correctness_trials_passed == 4
    assert "Passed 4/5 trials" in result.error_message


def test_the_next_trials_values_are_made_while_the_runner_runs_one(evaluator):
    result = evaluator.evaluate(request(SEES_TWO_SETS, request_id="sees-two", correctness_trials=3))
    assert result.verdict == Verdict.WRONG_OUTPUT, (result.verdict, result.error_message)


def test_one_trial_alone_still_passes(evaluator):
    result = evaluator.evaluate(request(SEES_TWO_SETS, request_id="one-trial", correctness_trials=1))
    assert result.verdict == Verdict.CORRECT, (result.verdict, result.error_message)
