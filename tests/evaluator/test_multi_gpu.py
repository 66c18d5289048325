"""The evaluator on several GPUs (skipped with fewer than two): requests spread over every GPU's worker, a candidate
crashing on one GPU leaves the evaluation running on another untouched, and a candidate sees no GPU but its own."""

from __future__ import annotations

import pytest

from evaluator.api import Verdict
from tests.evaluator.pool_support import GOOD, candidate, make_evaluator, request

pytestmark = pytest.mark.gpu


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001
        return 0


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    if _gpu_count() < 2:
        pytest.skip("needs at least two GPUs")
    ev = make_evaluator(str(tmp_path_factory.mktemp("cache")), devices="auto", compile_workers=0)
    yield ev
    ev.close()


def _device_of(result) -> str:
    return result.worker_id.split("-", 1)[1]  # worker ids read "e<N>-<device>"


def test_requests_spread_over_every_gpu(evaluator):
    assert evaluator.devices == [f"cuda:{i}" for i in range(_gpu_count())]
    futures = [evaluator.submit(request(GOOD, request_id=f"r{i}", timing_trials=20)) for i in range(8 * _gpu_count())]
    results = [f.result(timeout=300) for f in futures]
    assert all(r.verdict == Verdict.CORRECT for r in results), [r.error_message for r in results]
    assert {_device_of(r) for r in results} == set(evaluator.devices)
    assert len({r.request_id for r in results}) == len(results)


def test_a_crash_on_one_gpu_leaves_the_other_gpus_work_alone(evaluator):
    slow = candidate("y = x\nfor _ in range(20000):\n    y = x.clamp_min(0)\ntorch.cuda.synchronize()\nreturn y")
    crash = candidate("ctypes.string_at(0)\nreturn x", prelude="import ctypes")
    long_one = evaluator.submit(request(slow, request_id="slow", correctness_trials=1, timing_trials=5,
                                        run_timeout_s=120))
    crashed = evaluator.submit(request(crash, request_id="crash", run_timeout_s=60)).result(timeout=120)
    assert crashed.verdict == Verdict.CRASHED and "SIGSEGV" in crashed.error_message
    survived = long_one.result(timeout=300)
    assert survived.verdict == Verdict.CORRECT, survived.error_message
    assert _device_of(survived) != _device_of(crashed)
    assert evaluator.evaluate(request(GOOD)).verdict == Verdict.CORRECT


def test_a_candidate_sees_no_gpu_but_its_own(evaluator):
    # With every /dev/nvidiaN bound, a candidate could start a child with another CUDA_VISIBLE_DEVICES and spin on a
    # GPU where another slot is timing; its sandbox now holds only its own GPU's node (evaluator/isolation/gpu_nodes).
    probe = candidate("if len(NODES) != 1:\n    raise RuntimeError(f'reached {NODES}')\nreturn x.clamp_min(0)",
                      prelude="import glob\nNODES = glob.glob('/dev/nvidia[0-9]*')")
    results = [evaluator.submit(request(probe, request_id=f"n{i}")) for i in range(2 * _gpu_count())]
    for result in (f.result(timeout=300) for f in results):
        assert result.verdict == Verdict.CORRECT, result.error_message
