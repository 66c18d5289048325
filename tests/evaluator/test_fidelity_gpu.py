"""Issue 24 on a GPU (skipped without CUDA), through the real evaluator's slot: the lazy library-plus-token kernel
against honest ones (both speedups and the own-kernel share the reward uses), the persisting-L2 hack and reset, a
near miss that must not flip, and a candidate's child refused a CUDA context of its own."""

from __future__ import annotations

import ctypes
import json
import os

import pytest

from tests.evaluator.candidates.harness import builtin, candidate, request

pytestmark = pytest.mark.gpu

RELU = builtin("relu")
GEMM = builtin("gemm_bias_relu_scale")
FUSION = {"BATCH": 1024, "IN_FEATURES": 4096, "OUT_FEATURES": 4096}
BIG = {"BATCH": 4096, "DIM": 16384}
WRONG_RELU = "import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n" \
             "        return torch.where(x > 0, x, 0.1 * x)\n"
# KernelBench level 1's masked cumsum at its own sizes (128 x 4000 = 512,000 elements), where a verdict flipped.
MASKED_CUMSUM = '''
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x, mask):
        return torch.cumsum(x * mask, dim=1)
def get_inputs():
    return [torch.randn(128, 4000), torch.randint(0, 2, (128, 4000)).bool()]
def get_init_inputs():
    return []
'''
REPEATS = 5
CASES = [  # (id, reference, candidate source, backend, sizes)
    ("lazy_token", GEMM, candidate("lazy_library_token.py"), "cuda", FUSION),
    ("cublas_epilogue", GEMM, candidate("cuda_cublas_in_extension.py"), "cuda", FUSION),
    ("cuda_relu", RELU, candidate("cuda_relu.py"), "cuda", BIG),
    ("relu_few_blocks", RELU, candidate("cuda_relu_few_blocks.py"), "cuda", BIG),
    ("wrong_relu", RELU, WRONG_RELU, "torch", BIG),
    ("persisting_l2", RELU, candidate("hack_persisting_l2.py"), "cuda", BIG),
    ("self_relu_small", RELU, candidate("relu_torch.py"), "torch", {"BATCH": 64, "DIM": 4096}),
    ("self_gemm_small", GEMM, GEMM.replace("class Model(", "class ModelNew("), "torch", {}),
    ("child_cuda_probe", RELU, candidate("probe_child_cuda.py"), "torch", {"BATCH": 64, "DIM": 4096}),
] + [(f"masked_cumsum_{k}", MASKED_CUMSUM, candidate("near_miss_cumsum.py"), "torch", {}) for k in range(REPEATS)]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Every case through the evaluator users run: the pool's slot on cuda:0 (judge, sandboxed runner, device gates)."""
    import torch

    from evaluator.contract.types import EvalRequest
    from tests.evaluator.pool_support import make_evaluator

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    requests = [EvalRequest.from_dict(request(rid, ref, source, backend=backend, size_overrides=sizes,
                                              timing_trials=30, warmup_trials=3, run_timeout_s=120.0))
                for rid, ref, source, backend, sizes in CASES]
    with make_evaluator(str(tmp_path_factory.mktemp("krl-cache")), devices="cuda:0", spare_per_device=0,
                        compile_workers=4) as ev:
        out = [result.to_dict() for result in ev.evaluate_many(requests)]
    folder = os.environ.get("KRL_GPU_RESULTS_DIR")
    if folder:  # the recorded results behind tests/core/test_fidelity_reward.py and the README's figures
        with open(os.path.join(folder, "fidelity_results.json"), "w") as handle:
            json.dump(out, handle, indent=1)
    return {r["request_id"]: r for r in out}


def test_lazy_kernel_is_correct_at_library_speed_with_a_token_share(results):
    lazy, honest = results["lazy_token"], results["cublas_epilogue"]
    assert lazy["verdict"] == "correct" and honest["verdict"] == "correct", (lazy["error_message"], honest["error_message"])
    assert lazy["own_kernel_time_fraction"] < 0.02
    assert honest["own_kernel_time_fraction"] > lazy["own_kernel_time_fraction"]


def test_a_child_of_the_candidates_gets_no_cuda_context_of_its_own(results):
    """The task's group refuses new opens of the GPU's node to every process but the runner
    (isolation/device_access.py), while the lazy-kernel test above shows the runner's own profile still records its
    kernels."""
    probe = results["child_cuda_probe"]
    assert probe["verdict"] == "correct", (probe["verdict"], probe["error_message"])


def test_both_conventions_are_stamped_on_every_correct_timed_result(results):
    for rid, res in results.items():
        if res["verdict"] != "correct":
            continue
        assert res["speedup"] > 0 and res["speedup_kernelbench"] > 0, rid
        assert res["kernel_runtime_kernelbench_ms"] > 0 and res["reference_runtime_kernelbench_ms"] > 0, rid


def test_identical_code_reads_about_one_in_the_judges_convention(results):
    for rid in ("self_relu_small", "self_gemm_small"):
        assert 0.7 < results[rid]["speedup"] < 1.4, (rid, results[rid]["speedup"])


@pytest.mark.xfail(reason="known gap (docs/known-gaps.md): KernelBench's convention times each call alone with the "
                          "runner's events, which other slots' GPU work inflates; an identical small ReLU read "
                          "0.51-0.66 in sessions 11-12", strict=False)
def test_identical_code_reads_about_one_in_kernelbenchs_convention(results):
    for rid in ("self_relu_small", "self_gemm_small"):
        assert 0.7 < results[rid]["speedup_kernelbench"] < 1.4, (rid, results[rid]["speedup_kernelbench"])


def test_persisting_l2_window_is_caught(results):
    res = results["persisting_l2"]
    assert res["verdict"] == "hack_detected" and res["hack_rule"] == "persisting_l2"


def test_wrong_kernel_stays_wrong(results):
    assert results["wrong_relu"]["verdict"] == "wrong_output"


def test_masked_cumsum_gets_one_verdict_over_repeats(results):
    verdicts = {results[f"masked_cumsum_{k}"]["verdict"] for k in range(REPEATS)}
    assert len(verdicts) == 1, [results[f"masked_cumsum_{k}"]["error_message"] for k in range(REPEATS)]


def test_the_reset_undoes_a_persisting_l2_limit():
    import torch

    from evaluator.judging.l2_persist import CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE, PersistingL2Reset

    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    torch.empty(1, device="cuda").add_(1)
    reset = PersistingL2Reset()
    assert reset.available
    reset.library.cudaDeviceSetLimit(ctypes.c_int(CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE), ctypes.c_size_t(4 << 20))
    assert reset.persisting_limit_bytes() > 0  # what a candidate can set
    assert reset.reset() and reset.persisting_limit_bytes() == 0
    assert not reset.reset_if_set()  # nothing set: only the limit is read
