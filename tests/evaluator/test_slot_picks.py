"""Which timed batches show picked outputs: the projection checks every call of every batch, but it sees only
floating-point outputs, so an index or mask output (argmax, a comparison) has its picked calls checked on every batch,
while a floating-point one may skip them on most. Picked outputs are kept in the runner and handed over after the
timing's rounds, in one order. Read from the judge's own record of its orders (KRL_EVAL_TRACE)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from evaluator.contract.types import EvalRequest, Verdict
from evaluator.slot.timing_phase import TimingPhase
from tests.evaluator.pool_support import make_evaluator

PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return {body}


def get_inputs():
    return [torch.randn(16, 256)]


def get_init_inputs():
    return []
'''
PROBLEMS = {"argmax": "torch.argmax(x, dim=1)", "softmax": "torch.softmax(x, dim=1)"}


@pytest.fixture(scope="module")
def traced(tmp_path_factory, monkeypatch_module):
    trace = tmp_path_factory.mktemp("trace") / "orders.jsonl"
    monkeypatch_module.setenv("KRL_EVAL_TRACE", str(trace))  # read by the judge hosts the evaluator starts
    evaluator = make_evaluator(str(tmp_path_factory.mktemp("picks")))
    try:
        results = {}
        for name, body in PROBLEMS.items():
            reference = PROBLEM.format(body=body)
            results[name] = evaluator.evaluate(EvalRequest(
                reference_source=reference, candidate_source=reference.replace("class Model(", "class ModelNew("),
                backend="torch", problem_id=f"picks/{name}", request_id=name, timing_trials=3,
                kernelbench_timing=False))
    finally:
        evaluator.close()
    orders = {line["request_id"]: [kind for kind, *_ in line["orders"]]
              for line in map(json.loads, trace.read_text().splitlines())}
    return results, orders, trace


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_an_index_output_shows_picked_calls_after_every_batch(traced):
    results, orders, _ = traced
    assert results["argmax"].verdict == Verdict.CORRECT, results["argmax"].error_message
    runs, keeps, hands = (orders["argmax"].count(kind) for kind in ("run", "keep", "hand"))
    # every batch: the projection, then the picked outputs kept; all of them handed over in one order after the rounds
    assert runs >= 4 and keeps == runs and hands == runs + 1


def test_a_floating_point_output_is_projected_after_every_batch(traced):
    results, orders, _ = traced
    assert results["softmax"].verdict == Verdict.CORRECT, results["softmax"].error_message
    runs, keeps, hands = (orders["softmax"].count(kind) for kind in ("run", "keep", "hand"))
    assert runs >= 4 and hands == runs + 1 and keeps == runs  # the projection and a pick every batch, kept handed once


def test_every_batch_is_picked_two_calls_on_a_first_batch_and_where_the_projection_cannot_see():
    """Since session 29 no batch goes without a pick: a runner skipped or cut the unpicked ones (red teams)."""
    phase = TimingPhase(SimpleNamespace(device="cpu"), SimpleNamespace(), SimpleNamespace())
    phase.projected_whole = lambda: True
    phase.rng = SimpleNamespace(sample=lambda calls, k: list(calls)[:k])
    assert phase.picks(10, first=True) == [0, 1]
    assert phase.picks(10, first=False) == [0]
    assert phase.picks(1, first=True) == [0]
    phase.projected_whole = lambda: False  # an index or mask output
    assert phase.picks(10, first=False) == [0, 1]



def test_the_under_load_benchmark_reads_each_sides_parts_from_the_judges_own_trace(traced):
    """bench_timing_under_load.py --trace: each side's batch and hand-over a call, from the rounds the judge recorded."""
    from tests.bench.bench_timing_under_load import trace_parts
    from tests.bench.slot_bench import PARTS, parts_per_call

    _, _, trace = traced
    by_kernel = trace_parts(str(trace))[""]  # these request ids carry no pass
    assert set(by_kernel) == set(PROBLEMS)
    for parts in by_kernel.values():
        assert set(parts) == set(PARTS) and all(value > 0 for value in parts.values()), parts
    assert parts_per_call([]) == {}
