"""KernelBench's convention through the real slot on a GPU (skipped without CUDA): the runner's own event times are
believed within the judge's bounds, forged tiny ones come out at the lower bound, unusable ones at the upper bound,
and a report of the wrong size breaks the protocol. One evaluator for the module, one fp32 matmul problem."""

from __future__ import annotations

import pytest

from evaluator.contract.types import EvalRequest, Verdict
from evaluator.slot.kernelbench_phase import CLOCK
from tests.evaluator.candidates.harness import matmul_reference

pytestmark = pytest.mark.gpu

# ~17 GFLOP in fp32: ~0.3-0.4 ms a call on an H100, well above a flush and the judge's harness, so the lower bound
# is a real one (its speed-of-light floor alone is ~0.2 ms).
MATMUL = matmul_reference(2048)
FORWARD = '''
class ModelNew(nn.Module):
    def forward(self, a, b):
        return a @ b
'''
HONEST = "import torch\nimport torch.nn as nn\n" + FORWARD
# The runner's event timing patched from the candidate's module (the evaluator's modules are in its reach): each
# call reported 1000x faster, or NaN, or one number for the whole order.
PATCHED = '''
import importlib
import torch.nn as nn
_timing = importlib.import_module("evaluator.judging.kernelbench_timing")
_real = _timing.event_times_ms
def _forged(call, sets, flush, keep):
    return @REPORT@
_timing.event_times_ms = _forged
''' + FORWARD
TINY = PATCHED.replace("@REPORT@", "[t / 1000 for t in _real(call, sets, flush, keep)]")
NAN = PATCHED.replace("@REPORT@", "[float('nan') for t in _real(call, sets, flush, keep)]")
SHORT = PATCHED.replace("@REPORT@", "_real(call, sets, flush, keep)[:1]")
# torch's own Event patched: its guard restores torch and calls it a hack; either way no better than the lower bound.
EVENT_CLASS = '''
import importlib
import torch.nn as nn
_events = importlib.import_module("torch.cuda").Event
type.__setattr__(_events, "elapsed" + "_time", lambda self, end: 1e-4)
''' + FORWARD
CASES = {"honest": HONEST, "tiny": TINY, "nan": NAN, "short": SHORT, "event_class": EVENT_CLASS}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    import torch

    from tests.evaluator.pool_support import make_evaluator

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    with pytest.MonkeyPatch.context() as patch:  # the pool's processes take their environment as they start
        patch.setenv("KRL_WORKER_REFERENCE_FIRST", "1")  # the runner's figure recorded too (a diagnostic, never charged)
        evaluator = make_evaluator(str(tmp_path_factory.mktemp("kb-events")), devices="cuda:0")
    try:
        return {name: evaluator.evaluate(EvalRequest(reference_source=MATMUL, candidate_source=source,
                                                     problem_id="kb-events/matmul", backend="torch", request_id=name,
                                                     correctness_trials=2, timing_trials=20, run_timeout_s=120.0))
                for name, source in CASES.items()}
    finally:
        evaluator.close()


def _phase(result, name: str) -> float:
    return result.phase_times_s[f"kernelbench_{name}"] * 1e3  # stamped in seconds per call


def test_an_honest_runners_events_are_believed(results):
    honest = results["honest"]
    assert honest.verdict == Verdict.CORRECT, honest.error_message
    assert honest.kernelbench_clock == CLOCK
    assert honest.phase_times_s["kernelbench_clamped"] == 0, honest.phase_times_s
    assert honest.kernel_runtime_kernelbench_ms == pytest.approx(_phase(honest, "reported_per_call"), abs=1e-5)
    assert _phase(honest, "lower_per_call") < honest.kernel_runtime_kernelbench_ms < _phase(honest, "upper_per_call")
    assert 0.75 < honest.speedup_kernelbench < 1.33  # the same code on both sides
    # The bound's harness is the counted rounds' own (timing_phase.note_harness): a share of the matmul's call far
    # below the call itself.
    assert 0 < _phase(honest, "harness_per_call") < 0.5 * _phase(honest, "batch_per_call")


def test_the_judges_reference_is_stamped_and_the_runners_first_figure_recorded_when_asked(results):
    honest = results["honest"]
    assert "kernelbench_reference_in_runner" not in honest.phase_times_s, honest.phase_times_s
    assert honest.reference_runtime_kernelbench_ms == pytest.approx(_phase(honest, "judge_reference_per_call"),
                                                                    abs=1e-5)
    # the same reference, timed by the same events in two processes: a 0.3 ms matmul is not launch-bound
    assert 0.8 < _phase(honest, "reference_first_per_call") / _phase(honest, "judge_reference_per_call") < 1.25


def test_forged_tiny_event_times_come_out_at_the_lower_bound(results):
    tiny, honest = results["tiny"], results["honest"]
    assert tiny.verdict == Verdict.CORRECT, tiny.error_message
    assert tiny.phase_times_s["kernelbench_clamped"] == -1, tiny.phase_times_s
    assert _phase(tiny, "reported_per_call") < tiny.kernel_runtime_kernelbench_ms / 100
    assert tiny.kernel_runtime_kernelbench_ms == pytest.approx(_phase(tiny, "lower_per_call"), abs=1e-5)
    assert tiny.speedup_kernelbench < 2.0 and tiny.speedup_kernelbench < 2.0 * honest.speedup_kernelbench


def test_unusable_event_times_are_charged_the_judges_own_clock(results):
    nan = results["nan"]
    assert nan.verdict == Verdict.CORRECT, nan.error_message
    assert nan.phase_times_s["kernelbench_clamped"] == 1 and "kernelbench_reported_per_call" not in nan.phase_times_s
    assert nan.kernel_runtime_kernelbench_ms == pytest.approx(_phase(nan, "upper_per_call"), abs=1e-5)


def test_a_report_of_the_wrong_size_breaks_the_protocol(results):
    short = results["short"]
    assert short.verdict == Verdict.CRASHED, (short.verdict, short.error_message)
    assert "broke the judge's protocol" in short.error_message


def test_torchs_event_patched_gains_nothing(results):
    forged = results["event_class"]
    if forged.verdict == Verdict.HACK_DETECTED:
        return  # the runtime guard saw torch patched: no speed at all
    assert forged.verdict == Verdict.CORRECT, forged.error_message
    assert forged.phase_times_s["kernelbench_clamped"] == -1
    assert forged.kernel_runtime_kernelbench_ms == pytest.approx(_phase(forged, "lower_per_call"), abs=1e-5)
