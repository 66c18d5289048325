"""The judge's side of a timed call's nudged values: it makes the set named by the runner from its own copy of the
base set, so an output for those values is checked against its own reference output, never the runner's."""

from __future__ import annotations

import os

import torch

from evaluator.judging import judge, tensorwire
from evaluator.api import EvalResult, Verdict
from evaluator.slot.judge_host import TaskJudge
from tests.evaluator.pool_support import GOOD, request


def _judge(tmp_path) -> TaskJudge:
    inputs_dir, outputs_dir = tmp_path / "in", tmp_path / "out"
    inputs_dir.mkdir()
    outputs_dir.mkdir()
    return TaskJudge(request(GOOD, request_id="nudge"), "cpu", str(inputs_dir), str(outputs_dir))


def _hand_over(task: TaskJudge, name: str, output) -> None:
    tensorwire.write_values(os.path.join(task.outputs_dir, name + ".krlt"), output)
    task.receive(name)


def test_an_output_for_nudged_values_is_judged_on_the_judges_own_nudged_set(tmp_path):
    task = _judge(tmp_path)
    assert task.write_inputs("timing-1") == ""
    base = list(tensorwire.read_values(os.path.join(task.inputs_dir, "timing-1.krlt"), 2**30))
    nudged = judge.nudged_values(base, 987654321)  # what the runner gives a timed call
    name = judge.nudged_set_name(1, 987654321)
    _hand_over(task, name, torch.relu(nudged[0]))
    assert task.received[name].comparison.ok
    assert not os.path.exists(os.path.join(task.inputs_dir, name + ".krlt"))  # made for checking only

    stale = judge.nudged_set_name(1, 5)  # the answer for the base values, handed over as another set's
    _hand_over(task, stale, torch.relu(base[0]))
    assert not task.received[stale].comparison.ok
    assert len(task.base_values) == 1  # both nudged sets made from one decoded copy of base set 1
    for other in ("trial-0", "trial-1", "recheck"):  # right everywhere else
        task.write_inputs(other)
        _hand_over(task, other, torch.relu(tensorwire.read_values(os.path.join(task.inputs_dir, other + ".krlt"),
                                                                  2**30)[0]))
    verdict = task.decide(EvalResult(request_id="nudge", problem_id="test/relu", verdict=Verdict.CORRECT))
    assert verdict.verdict == Verdict.WRONG_OUTPUT and "while being timed" in verdict.error_message


def test_a_nudged_set_is_served_like_any_other_and_names_out_of_range_are_refused(tmp_path):
    task = _judge(tmp_path)
    name = judge.nudged_set_name(0, 42)
    assert task.write_inputs(name) == ""
    served = tensorwire.read_values(os.path.join(task.inputs_dir, name + ".krlt"), 2**30)
    task.write_inputs("timing-0")
    base = tensorwire.read_values(os.path.join(task.inputs_dir, "timing-0.krlt"), 2**30)
    assert torch.equal(served[0], judge.nudged_values(list(base), 42)[0])
    assert "no input set" in task.write_inputs("nudged-64-1")  # beyond the judge's timing sets
