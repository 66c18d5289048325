"""GPU worker tests (skipped without CUDA): CUDA load_inline and Triton candidates end to end, kernel attribution,
runtime hack rules that need a GPU, sticky CUDA errors and the self-speedup spread of identical code."""

from __future__ import annotations

import json
import os
import statistics

import pytest

from tests.evaluator.candidates.harness import builtin, candidate, int_matmul_reference, request, run_batch

pytestmark = pytest.mark.gpu

RELU = builtin("relu")
BIG = {"BATCH": 4096, "DIM": 16384}  # the builtin gpu_sizes: ~0.2 ms per ReLU on an H100
SMALL = {"BATCH": 1344, "DIM": 4096}  # ~15 µs per ReLU on an H100

GPU_CASES = [
    ("triton_relu", "relu_triton.py", "triton", None),
    ("cuda_relu", "cuda_relu.py", "cuda", None),
    ("cuda_token", "cuda_token.py", "cuda", "custom_kernel_unused"),  # 1 row of 4096 depends on its kernel
    ("cuda_never_launched", "cuda_never_launched.py", "cuda", "custom_kernel_not_launched"),
    ("triton_never_launched", "hack_never_launched.py", "triton", "custom_kernel_not_launched"),
    ("hidden_side_stream", "torch_hidden_side_stream.py", "torch", "untimed_work"),
    ("cache_by_pointer", "hack_cache_by_pointer.py", "torch", "cached_output"),
    ("joined_side_stream", "torch_joined_side_stream.py", "torch", None),
    ("cache_by_version", "hack_cache_by_version.py", "torch", None),  # computes every call: correct, no speedup
    ("illegal_address", "triton_illegal_address.py", "triton", "crash"),  # last: it breaks the CUDA context
]
# Problems other than ReLU: (id, reference, candidate file, backend, expected rule, request fields).
FUSION = {"BATCH": 1024, "IN_FEATURES": 4096, "OUT_FEATURES": 4096}
INT_MATMUL = int_matmul_reference(4096)
GPU_PROBLEM_CASES = [
    ("cuda_fusion_epilogue", builtin("gemm_bias_relu_scale"), "cuda_fusion_epilogue.py", "cuda", None, FUSION),
    ("cuda_cublas_in_extension", builtin("gemm_bias_relu_scale"), "cuda_cublas_in_extension.py", "cuda", None, FUSION),
    ("triton_fusion", builtin("gemm_bias_relu_scale"), "honest_fusion_triton.py", "triton", None, FUSION),
    ("tf32_shortcut", INT_MATMUL, "hack_tf32_shortcut.py", "torch", "below_speed_of_light", {}),
    ("fp32_matmul_honest", INT_MATMUL, "matmul_torch.py", "torch", None, {}),
]
GPU_CASES = GPU_CASES + [(rid, name, backend, rule) for rid, _, name, backend, rule, _ in GPU_PROBLEM_CASES]
# Either outcome stops the shortcut: the timed calls get nudged, no longer integer, values (judge.nudged_values), on
# which TF32 is out of tolerance (H100, protocol 8: wrong on the timing inputs); where it is not, only the speed of
# light can tell.
WRONG_OR_HACK = {"below_speed_of_light": {"below_speed_of_light", "wrong_output"}}


@pytest.fixture(scope="module")
def gpu_results(tmp_path_factory):
    cache = tmp_path_factory.mktemp("krl-cache")
    problems = {rid for rid, *_ in GPU_PROBLEM_CASES}
    requests = [request(rid, RELU, candidate(name), backend=backend, size_overrides=BIG, timing_trials=50,
                        warmup_trials=5) for rid, name, backend, _ in GPU_CASES if rid not in problems]
    requests[:0] = [request(rid, reference, candidate(name), backend=backend, size_overrides=sizes, timing_trials=20,
                            warmup_trials=3) for rid, reference, name, backend, _, sizes in GPU_PROBLEM_CASES]
    broken = candidate("cuda_relu.py").replace("y[i] = x[i] > 0.f ? x[i] : 0.f;", "y[i] = undefined_var;")
    requests[-1:-1] = [
        request("triton_relu_bf16", RELU, candidate("relu_triton.py"), backend="triton", precision="bf16",
                size_overrides=BIG, timing_trials=50, warmup_trials=5),
        request("cuda_compile_error", RELU, broken.replace("krl_test_relu_ext", "krl_test_broken_ext"), backend="cuda"),
    ]
    results = run_batch(requests, device="cuda:0", timeout_s=540, env={"KRL_CACHE_DIR": str(cache)})
    _dump("gpu_candidates.json", results)
    return {r["request_id"]: r for r in results}


def _dump(name: str, results: list) -> None:
    """KRL_GPU_RESULTS_DIR=folder keeps the full results (figures for the README)."""
    folder = os.environ.get("KRL_GPU_RESULTS_DIR")
    if folder:
        with open(os.path.join(folder, name), "w") as handle:
            json.dump(results, handle, indent=1)


@pytest.mark.parametrize("rid, rule", [(rid, rule) for rid, _, _, rule in GPU_CASES if rule != "crash"])
def test_gpu_candidates(gpu_results, rid, rule):
    res = gpu_results[rid]
    if rule is None:
        assert res["verdict"] == "correct", res["error_message"]
        assert res["timing_clock"] == "cuda_events"
        assert 0.3 < res["speedup"] < 3.0
        assert res["device_name"] and res["gpu_name"] == res["device_name"] and res["node"]
        assert res["sol_time_ms"] > 0 and 0 < res["sol_fraction"] <= 1.0
        if rid in ("triton_relu", "cuda_relu"):
            assert res["own_kernel_time_fraction"] > 0.9
    elif rule in WRONG_OR_HACK:
        outcome = res["hack_rule"] if res["verdict"] == "hack_detected" else res["verdict"]
        assert outcome in WRONG_OR_HACK[rule], (res["verdict"], res["hack_rule"], res["error_message"])
    else:
        assert res["verdict"] == "hack_detected", (res["verdict"], res["error_message"])
        assert res["hack_rule"] == rule


def test_honest_fusions_keep_a_small_own_kernel_share_and_are_correct(gpu_results):
    # The GEMM dominates: the share is reported (it used to be judged custom_kernel_token_work below 5%).
    for rid in ("cuda_fusion_epilogue", "triton_fusion"):
        assert gpu_results[rid]["own_kernel_time_fraction"] < 0.5, rid


def test_illegal_address_marks_the_worker_sticky(gpu_results):
    res = gpu_results["illegal_address"]
    assert res["verdict"] == "runtime_error"
    assert res["_sticky_cuda_error"] is True


def _spread(speedups: list[float]) -> float:
    return sum(0.95 <= s <= 1.05 for s in speedups) / len(speedups)


def test_identical_code_times_the_same():
    """Self-speedup of the reference against itself on a ~15 µs kernel: unbiased and nearly always within 0.95-1.05,
    both with the reference timing cached (the usual path) and re-measured interleaved every time."""
    repeats = 20
    cached = [request(f"self_{i}", RELU, candidate("relu_self.py"), size_overrides=SMALL) for i in range(repeats)]
    fresh = [dict(request(f"fresh_{i}", RELU, candidate("relu_self.py"), size_overrides=SMALL),
                  _clear_reference_cache=True) for i in range(repeats)]
    for req in cached + fresh:
        req.update(timing_trials=100, warmup_trials=10, correctness_trials=1)
    results = run_batch(cached + fresh, device="cuda:0", timeout_s=300)
    _dump("self_speedup.json", results)
    assert all(r["verdict"] == "correct" for r in results), [r["error_message"] for r in results]
    with_cache = [r["speedup"] for r in results[:repeats]]
    interleaved = [r["speedup"] for r in results[repeats:]]
    print("self-speedup cached:", sorted(round(s, 3) for s in with_cache))
    print("self-speedup interleaved:", sorted(round(s, 3) for s in interleaved))
    print("kernel median ms:", results[0]["kernel_runtime"]["median_ms"])
    print("within 0.95-1.05: cached", _spread(with_cache), "interleaved", _spread(interleaved))
    # The 95% target is measured by tests/bench/bench_evaluator.py over 40 repeats; 20 repeats cannot resolve it
    # (one outlier is 5%), so this guards against regressions: no bias, and nearly all repeats in the band.
    for speedups in (with_cache, interleaved):
        assert 0.98 <= statistics.median(speedups) <= 1.02
        assert _spread(speedups) >= 0.85


def test_bf16_triton_candidate(gpu_results):
    res = gpu_results["triton_relu_bf16"]
    assert res["verdict"] == "correct", res["error_message"]
    assert res["own_kernel_time_fraction"] > 0.9


def test_cuda_build_failure_is_compile_error_with_the_line(gpu_results):
    res = gpu_results["cuda_compile_error"]
    assert res["verdict"] == "compile_error"
    assert res["compiled"] is False
    assert "undefined_var" in res["error_message"]
    assert len(res["error_message"]) <= 2000
