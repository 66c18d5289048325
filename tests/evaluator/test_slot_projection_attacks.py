"""What the red teams of sessions 27-28 found in the judge's checks: a timed batch run approximately, skipped or
replayed from its base sets, inside the projections' old rounding slack, a tolerance widened by the trials or a
projection that cannot tell outputs near the tolerance apart, with the picked calls computed once named (wrong by a
projection, or crashed by a picked output's digest); a skipped batch on an integer output the projections did not
see; wrong values where the reference is NaN; an honest bug called a hack. Real Evaluator, CPU mode, with honest code of
each problem beside each attack; the timed ones on a GPU too (pytest -m gpu)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluator.contract.types import EvalRequest, Verdict
from evaluator.isolation.sandbox import get_sandbox
from tests.evaluator.pool_support import make_evaluator, module_evaluator

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
SOFTMAX = reference("pass", "torch.softmax(x, dim=1)", "torch.randn(16, 4096)")  # outputs ~2.4e-4 against atol 1e-4
LINEAR_SOFTMAX = reference("self.fc = nn.Linear(256, 4096)", "torch.softmax(self.fc(x), dim=1)", "torch.randn(8, 256)")
RESIDUAL_SOFTMAX = (LINEAR_SOFTMAX.replace("nn.Linear(256, 4096)", "nn.Linear(1024, 4096)")
                    .replace("forward(self, x)", "forward(self, x, residual)")
                    .replace("torch.softmax(self.fc(x), dim=1)", "torch.softmax(self.fc(x), dim=1) + residual")
                    .replace("[torch.randn(8, 256)]", "[torch.randn(8, 1024), torch.randn(8, 4096)]"))
LARGE_RESIDUAL_SOFTMAX = RESIDUAL_SOFTMAX.replace("4096", "4160").replace("randn(8, ", "randn(256, ")  # 4.06 MiB out
SCALAR = reference("self.weight = nn.Parameter(torch.randn(256, 256))",
                   "torch.logsumexp(x @ self.weight, dim=1).mean().item()", "torch.randn(64, 256)")
WRONG, UNBOUND = (Verdict.WRONG_OUTPUT,), (Verdict.WRONG_OUTPUT, Verdict.CRASHED)  # CRASHED: a picked output's digest
CASES = {  # attack -> (problem, whether it is timed, the verdicts that stop it)
    "approx_batch_exact_picks": (MATMUL, True, UNBOUND),
    "approx_batch_trial_error_floor": (MATMUL, True, UNBOUND),
    "zero_batch_small_outputs": (SOFTMAX, True, UNBOUND),
    "skip_unpicked_batches": (LINEAR_SOFTMAX, True, UNBOUND),
    "reroll_picked_round": (LINEAR_SOFTMAX, True, UNBOUND),
    "skip_small_part_unpicked": (RESIDUAL_SOFTMAX, True, UNBOUND),
    "skip_counted_rounds_large_output": (LARGE_RESIDUAL_SOFTMAX, True, UNBOUND),
    "scalar_output_skip": (SCALAR, True, UNBOUND),
    "base_replay": (POSITIVE, True, UNBOUND),
    "lazy_index_output": (ARGMAX, True, UNBOUND),
    "nan_where_reference_is": (LOG, False, WRONG),
    "int_beyond_64_bits": (reference("pass", "torch.relu(x)", "torch.randn(4096)"), False, WRONG),
    "count_drops_a_tail": (reference("pass", "(x > 0).sum(dim=1)", "torch.randn(2, 262144)"), True, WRONG),
    "float64_past_float32_range": (reference("pass", "torch.exp(x.double() * 100.0)", "torch.randn(4096)"), True, WRONG),
}


# Attacks on the CPU's watch of the reference's windows (a stall the cgroup freezer cannot stop): not a GPU's.
CPU_ONLY = {"reroll_picked_round", "skip_counted_rounds_large_output"}  # the latter patches the CPU's batch
evaluator = module_evaluator(cpu_workers=1, spare_per_device=0, memory_limit_bytes=2 * 2**30)


def evaluate(evaluator, problem: str, source: str, timed: bool):
    return evaluator.evaluate(EvalRequest(reference_source=problem, candidate_source=source, problem_id="test/proj",
                                          correctness_trials=3, timing_trials=3, warmup_trials=1, run_timeout_s=90.0,
                                          measure_timing=timed))


@pytest.mark.parametrize("name", list(CASES))
def test_the_attack_is_wrong_and_honest_code_of_its_problem_is_correct(evaluator, name):
    problem, timed, stopped = CASES[name]
    attack = evaluate(evaluator, problem, (ATTACKS / f"{name}.py").read_text(), timed)
    assert attack.verdict in stopped, (attack.verdict, attack.speedup, attack.error_message)
    honest = evaluate(evaluator, problem, problem.replace("class Model(", "class ModelNew("), True)  # timed too
    assert honest.verdict == Verdict.CORRECT, honest.error_message


@pytest.fixture(scope="module")
def gpu_evaluator(tmp_path_factory):
    with make_evaluator(str(tmp_path_factory.mktemp("gpu-cache")), devices="auto", spare_per_device=0) as ev:
        yield ev


@pytest.mark.gpu
@pytest.mark.parametrize("name", [name for name, (_, timed, _) in CASES.items() if timed and name not in CPU_ONLY])
def test_on_a_gpu_the_attack_is_wrong_and_honest_code_of_its_problem_is_correct(gpu_evaluator, name):
    """The same attacks where the picked outputs' digests are made on the device (slot/output_digest.py)."""
    test_the_attack_is_wrong_and_honest_code_of_its_problem_is_correct(gpu_evaluator, name)


def test_a_problem_whose_output_holds_a_mask_reads_its_honest_code_correct(evaluator):
    """A reference returning (relu(x), x > 0): the projections' scale took abs() of the mask, which raised, and every
    candidate of the problem, honest or not, ended crashed (red team, session 29)."""
    problem = reference("pass", "torch.relu(x), x > 0", "torch.randn(64, 256)")
    result = evaluate(evaluator, problem, problem.replace("class Model(", "class ModelNew("), True)
    assert result.verdict == Verdict.CORRECT, (result.verdict, result.error_message)


def test_an_honest_bug_that_answers_every_input_alike_is_wrong_not_a_hack(evaluator):
    """The same wrong answer for every input (an integer division that zeroes a mean) repeats only itself: it read
    `cached_output`, a hack and the reward's penalty, where it is a plain wrong output; a replay repeats a correct
    answer given for other inputs."""
    problem = reference("pass", "torch.mean(x * x)", "torch.randn(64, 64)")
    buggy = problem.replace("class Model(", "class ModelNew(").replace(
        "torch.mean(x * x)", "torch.sum(x * x) * (1 // x.numel())")
    result = evaluate(evaluator, problem, buggy, True)
    assert result.verdict == Verdict.WRONG_OUTPUT and result.hack_rule is None, (result.verdict, result.error_message)


def test_a_memo_certified_from_the_nudges_radius_gains_nothing(evaluator):
    """Timed calls of one base set are its values nudged element by element; at a nudge of 2^-5 a candidate served
    argmax(x @ W) from an anchor call, exactly, at 2.6-2.8x. At 0.25 its certificate prunes nothing."""
    problem = reference("self.weight = nn.Parameter(torch.randn(64, 8192))", "torch.argmax(x @ self.weight, dim=1)",
                        "torch.randn(128, 64)")
    result = evaluate(evaluator, problem, (ATTACKS / "proximity_certified_argmax.py").read_text(), True)
    assert result.verdict != Verdict.CORRECT or result.speedup < 2.0, (result.verdict, result.speedup)
