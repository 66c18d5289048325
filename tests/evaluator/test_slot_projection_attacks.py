"""The timed batch checked through its projections, attacked where they were loose (red team, session 27): a batch
run approximately or replayed from its base sets inside the projections' old rounding slack, a skipped batch on an
integer output they did not see, and wrong values where the reference is NaN. Real Evaluator, CPU mode, with honest
code of each problem beside each attack."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluator.contract.types import EvalRequest, Verdict
from evaluator.isolation.sandbox import get_sandbox
from tests.evaluator.pool_support import make_evaluator

pytestmark = pytest.mark.skipif(get_sandbox().kind == "none", reason="no sandbox works on this machine")

ATTACKS = Path(__file__).resolve().parent / "slot_attacks"


def reference(init: str, forward: str, inputs: str) -> str:
    return (f"import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n"
            f"        super().__init__()\n        {init}\n\n    def forward(self, x):\n        return {forward}\n\n\n"
            f"def get_inputs():\n    return [{inputs}]\n\n\ndef get_init_inputs():\n    return []\n")


MATMUL = reference("self.weight = nn.Parameter(torch.randn(1024, 1024))", "x @ self.weight", "torch.randn(32, 1024)")
POSITIVE = reference("self.weight = nn.Parameter(torch.rand(512, 512))", "x @ self.weight", "torch.rand(8, 512)")
ARGMAX = reference("self.weight = nn.Parameter(torch.randn(512, 512))", "torch.argmax(x @ self.weight, dim=1)",
                   "torch.randn(32, 512)")
LOG = reference("pass", "torch.log(x)", "torch.randn(4096)")
CASES = {  # attack -> (problem, whether it is timed)
    "approx_batch_exact_picks": (MATMUL, True),
    "base_replay": (POSITIVE, True),
    "lazy_index_output": (ARGMAX, True),
    "nan_where_reference_is": (LOG, False),
}


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    ev = make_evaluator(str(tmp_path_factory.mktemp("cache")), cpu_workers=1, spare_per_device=0,
                        memory_limit_bytes=2 * 2**30)
    yield ev
    ev.close()


def evaluate(evaluator, problem: str, source: str, timed: bool):
    return evaluator.evaluate(EvalRequest(reference_source=problem, candidate_source=source, problem_id="test/proj",
                                          correctness_trials=3, timing_trials=3, warmup_trials=1, run_timeout_s=90.0,
                                          measure_timing=timed))


@pytest.mark.parametrize("name", list(CASES))
def test_the_attack_is_wrong_and_honest_code_of_its_problem_is_correct(evaluator, name):
    problem, timed = CASES[name]
    attack = evaluate(evaluator, problem, (ATTACKS / f"{name}.py").read_text(), timed)
    assert attack.verdict == Verdict.WRONG_OUTPUT, (attack.verdict, attack.speedup, attack.error_message)
    honest = evaluate(evaluator, problem, problem.replace("class Model(", "class ModelNew("), True)  # timed too
    assert honest.verdict == Verdict.CORRECT, honest.error_message
