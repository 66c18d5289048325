"""Every hack rule: a candidate that trips it and an honest one that does not, statically (AST, in process) and at
runtime (through evaluate_in_process in a fresh worker subprocess); a meta-test holds every rule to both."""

from __future__ import annotations

import ast

import pytest

from evaluator.judging import rules
from evaluator.judging.rules import runtime, static as static_rules
from tests.evaluator.candidates.harness import LINEAR_REFERENCE, builtin, candidate, request, run_batch

TINY = {"BATCH": 4, "DIM": 64}
RELU = builtin("relu")


def static(source: str, backend: str = "triton"):
    finding = static_rules.findings(ast.parse(source), source, backend)
    return finding.rule if finding else None


CUDA_SOURCE = r'''
cuda_src = """
#include <torch/extension.h>
// one thread per element; no cudaStreamCreate or std::thread needed here
__global__ void __launch_bounds__(256) relu_kernel(const float* __restrict__ x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  /* block-stride, lock-free */
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
    __syncthreads();
}
torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
cpp_src = "torch::Tensor relu_cuda(torch::Tensor x);"
'''
CUDA_HONEST = "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n" + CUDA_SOURCE + '''
relu_ext = load_inline(name="relu_ext", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["relu_cuda"])

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = relu_ext

    def forward(self, x):
        return self.ext.relu_cuda(x.contiguous())
'''
CUDA_BUILDER_HONEST = "import torch\nimport torch.nn as nn\nimport torch.utils.cpp_extension as cpp\n" + CUDA_SOURCE + '''
def build():
    return cpp.load_inline(name="relu_ext", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["relu_cuda"])

class ReluFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return _ext.relu_cuda(x)

_ext = build()

class Block(nn.Module):
    def forward(self, x):
        return ReluFn.apply(x)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        y = self.block(x)
        return y
'''
CUDA_TORCH_OPS = "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n" + CUDA_SOURCE + '''
relu_ext = load_inline(name="relu_ext", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["relu_cuda"])

class ModelNew(nn.Module):
    def forward(self, x):
        relu_ext.relu_cuda(x[:1])  # token work
        return torch.relu(x)
'''
CUDA_FALLBACK = "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n" + CUDA_SOURCE + '''
try:
    relu_ext = load_inline(name="relu_ext", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["relu_cuda"])
except Exception:
    relu_ext = None

class ModelNew(nn.Module):
    def forward(self, x):
        if relu_ext is None:
            return torch.relu(x)
        return relu_ext.relu_cuda(x)
'''
CUDA_STREAM = CUDA_HONEST.replace("int n = x.numel();", "cudaStream_t s; cudaStreamCreate(&s); int n = x.numel();")
CUDA_THREAD = CUDA_HONEST.replace("int n = x.numel();", "std::thread t([]{}); t.join(); int n = x.numel();")
HEADER = "import torch\nimport torch.nn as nn\n"


STATIC_FILE_TRIPS = [
    ("hack_subclass_reference.py", "torch", "reference_model"),
    ("hack_introspection.py", "torch", "introspection"),
    ("hack_ref_via_subclasses.py", "triton", "introspection"),
    ("hack_patch_static.py", "torch", "patched_torch"),
    ("hack_thread.py", "torch", "side_work"),
    ("hack_swallow.py", "triton", "swallowed_kernel_failure"),
    ("relu_torch.py", "triton", "custom_kernel_bypassed"),  # no kernel defined: a token or overwritten kernel output
    # is the runtime rules' to find (RUNTIME_CASES)
    ("hack_persisting_l2.py", "cuda", "persisting_l2"),
]


@pytest.mark.parametrize("name, backend, rule", STATIC_FILE_TRIPS)
def test_static_rule_trips(name, backend, rule):
    assert static(candidate(name), backend) == rule


@pytest.mark.parametrize("source, backend, rule", [
    (HEADER + "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.m = Model()\n", "torch", "reference_model"),
    (HEADER + "setattr(torch, 'relu', lambda x: x)\n", "torch", "patched_torch"),
    (HEADER + "torch.Tensor.relu = lambda self: self\n", "torch", "patched_torch"),
    (HEADER + "from torch import cuda\ncuda.synchronize = lambda: None\n", "torch", "patched_torch"),
    ("import time as t\nt.perf_counter = lambda: 0.0\n", "torch", "patched_torch"),
    (HEADER + "from torch.overrides import TorchFunctionMode\nclass M(TorchFunctionMode):\n    pass\n", "torch", "patched_torch"),
    (HEADER + "import gc\nobjs = gc.get_objects()\n", "torch", "introspection"),
    (HEADER + "import sys\nref = sys.modules['x']\n", "torch", "introspection"),
    (HEADER + "from concurrent.futures import ThreadPoolExecutor\n", "torch", "side_work"),
    (HEADER + "torch.cuda.set_stream(torch.cuda.Stream())\n", "torch", "side_work"),
    (CUDA_THREAD, "cuda", "side_work"),
    (CUDA_TORCH_OPS, "cuda", "custom_kernel_bypassed"),
    (CUDA_FALLBACK, "cuda", "swallowed_kernel_failure"),
    (HEADER + "class ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n", "cuda", "custom_kernel_bypassed"),
], ids=["calls_Model", "setattr_torch", "Tensor_method", "from_import_alias", "time_alias", "function_mode",
        "gc_objects", "sys_modules", "thread_pool", "set_stream", "std_thread_in_cpp", "cuda_token_work",
        "cuda_build_fallback", "cuda_no_kernel"])
def test_static_rule_trips_inline(source, backend, rule):
    assert static(source, backend) == rule


STATIC_HONEST_IDS = ["triton_relu", "torch_relu", "torch_backend_exempt", "cuda_relu", "cuda_builder_autograd_submodule",
                     "backend_flags_and_local_attrs", "sys_version_current_stream", "optional_import",
                     "model_dim_parameter", "cuda_environ_and_function_handle", "triton_jit_called",
                     "side_stream_object", "cuda_stream_in_cpp", "side_stream_candidate", "fusion_triton",
                     "decoy_passes_static", "launch_via_dict", "launch_via_self_attr", "launch_via_lambda",
                     "launch_via_type_self", "launch_via_modulelist", "launch_via_partial", "kernel_under_import_guard",
                     "kernel_as_staticmethod", "launch_via_dict_comprehension"]


@pytest.mark.parametrize("source, backend", [
    (candidate("relu_triton.py"), "triton"),  # Model/lock/single-pass/BLOCK in prose, nn.Parameter, re-raising try
    (candidate("relu_torch.py"), "torch"),
    (candidate("hack_token_kernel.py"), "torch"),  # torch candidates are exempt from the custom-kernel rules
    (CUDA_HONEST, "cuda"),  # comments mention cudaStreamCreate and std::thread; code uses threadIdx, __syncthreads
    (CUDA_BUILDER_HONEST, "cuda"),  # builder function, autograd.Function, submodule
    (HEADER + "torch.backends.cuda.matmul.allow_tf32 = False\nclass Cfg:\n    pass\ncfg = Cfg()\ncfg.time = 3\n", "torch"),
    (HEADER + "import sys\nprint(sys.version)\ns = torch.cuda.current_stream()\n", "torch"),
    (HEADER + "try:\n    import triton\nexcept ImportError:\n    triton = None\n", "torch"),
    (HEADER + "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.model_dim = 3\n"
     "        self.w = nn.Parameter(torch.ones(3))\n", "torch"),
    (CUDA_HONEST.replace("relu_ext = load_inline(", "import os\nos.environ['TORCH_CUDA_ARCH_LIST'] = '9.0'\n"
                         "relu_fn = load_inline(").replace("self.ext = relu_ext", "self.fn = relu_fn.relu_cuda")
     .replace("self.ext.relu_cuda(", "self.fn("), "cuda"),
    (candidate("relu_triton.py").replace("@triton.jit\ndef relu_kernel(", "def _relu(")
     .replace("def launch_relu(", "relu_kernel = triton.jit(_relu)\n\n\ndef launch_relu("), "triton"),
    (HEADER + "s = torch.cuda.Stream()\n", "torch"),  # side streams are judged at runtime (joined or not)
    (CUDA_STREAM, "cuda"),
    (candidate("hack_side_stream.py"), "torch"),
    (candidate("honest_fusion_triton.py"), "triton"),
    (candidate("hack_decoy_triton.py"), "triton"),  # `0 * y.sum()` fools the taint: the runtime poisoning does not
    (candidate("honest_launch_via_dict.py"), "triton"),
    (candidate("honest_launch_via_self_attr.py"), "triton"),
    (candidate("honest_launch_via_lambda.py"), "triton"),
    (candidate("honest_launch_via_type_self.py"), "triton"),
    (candidate("honest_launch_via_modulelist.py"), "triton"),
    (candidate("honest_launch_via_partial.py"), "triton"),
    (candidate("honest_kernel_under_import_guard.py"), "triton"),
    (candidate("honest_kernel_as_staticmethod.py"), "triton"),
    (candidate("honest_launch_via_dict_comprehension.py"), "triton"),
], ids=STATIC_HONEST_IDS)
def test_honest_candidates_pass_static_rules(source, backend):
    assert static(source, backend) is None


def test_every_rule_has_feedback_text():
    for rule in rules.RULES:
        text = rules.message(rule, "detail")
        assert rule in text and "detail" in text


def test_profiles_that_never_see_device_work_judge_nothing(monkeypatch):
    """A profiler that records no device work at all, on every try, is the profiler failing (seen at 8 slots on an
    H100 for honest CUDA kernels): nothing is judged, where a profile with other kernels and none of the candidate's
    still counts zero own launches."""
    from evaluator.judging import timing
    from evaluator.slot import run_state

    class Runner:  # the two RunState methods _profile_candidate calls around the profiled call
        def _sync(self):
            pass

        def _call_candidate(self, model, inputs, watch):
            return model(*inputs)

    profiles = []
    monkeypatch.setattr(timing, "profiler_events", lambda body, cpu=False: (body(), profiles.append(1), [])[2])
    found = run_state.RunState._profile_candidate(Runner(), lambda x: x, [1], {"relu_kernel"}, None)
    assert found == (None, None, 0) and len(profiles) == run_state.PROFILE_ATTEMPTS

    class Event:
        name, device_type = "void at::native::vectorized_elementwise_kernel<4>(...)", "DeviceType.CUDA"
        self_device_time_total = 5.0

    monkeypatch.setattr(timing, "profiler_events", lambda body, cpu=False: [Event()])
    fraction, own, total = run_state.RunState._profile_candidate(Runner(), lambda x: x, [1], {"relu_kernel"}, None)
    assert (own, total) == (0, 1) and fraction == 0.0


def test_own_kernel_names_from_triton_and_cuda():
    assert static_rules.own_kernel_names(candidate("relu_triton.py")) == {"relu_kernel"}
    assert static_rules.own_kernel_names(CUDA_HONEST) == {"relu_kernel"}


def test_own_kernel_fraction_from_profiler_events():
    class Range:
        def __init__(self, us):
            self.us = us

        def elapsed_us(self):
            return self.us

    class Event:
        def __init__(self, name, us, device="DeviceType.CUDA"):
            self.name, self.time_range, self.device_type = name, Range(us), device

    events = [Event("void relu_kernel<float>(float const*, float*, int)", 30.0),
              Event("void at::native::vectorized_elementwise_kernel<4>(...)", 10.0),
              Event("relu_kernel_launch_cpu_op", 500.0, device="DeviceType.CPU")]
    fraction, own, total = runtime.own_kernel_fraction(events, {"relu_kernel"})
    assert (own, total) == (1, 2)
    assert fraction == pytest.approx(0.75)
    assert runtime.own_kernel_fraction(events, set())[0] == 0.0


def test_untimed_work_cross_check():
    assert runtime.untimed_work(0.015, 0.020, 0.010) is None  # launch overhead only
    assert runtime.untimed_work(0.015, 0.030, 0.028) is None  # host-bound forward
    assert runtime.untimed_work(0.015, 1.500, 0.010).rule == "untimed_work"  # work hidden on another stream


RUNTIME_CASES = [
    ("reference_via_gc", "hack_reference_via_gc.py", "torch", "reference_model"),
    ("never_launched", "hack_never_launched.py", "triton", "custom_kernel_not_launched"),
    ("cache_by_shape", "hack_cache_by_shape.py", "torch", "cached_output"),
    ("cache_by_pointer", "hack_cache_by_pointer.py", "torch", "cached_output"),
    ("mutate_input", "hack_mutate_input.py", "torch", "input_mutation"),
    ("patch_runtime", "hack_patch_runtime.py", "torch", "patched_torch"),
    ("honest_after_patch", "relu_torch.py", "torch", None),
    ("patch_in_forward", "hack_patch_in_forward.py", "torch", "patched_torch"),
    ("thread_left_running", "hack_thread_hidden.py", "torch", "side_work"),
    ("swallow_via_worker", "hack_swallow.py", "triton", "swallowed_kernel_failure"),
    ("honest_triton", "relu_triton.py", "triton", None),
    ("skip_repeated_input", "hack_skip_repeated_input.py", "torch", "cached_output"),
    ("decoy_triton", "hack_decoy_triton.py", "triton", "custom_kernel_unused"),
    ("token_kernel", "hack_token_kernel.py", "triton", "custom_kernel_unused"),
    ("overwritten_kernel_output", "hack_overwritten_kernel_output.py", "triton", "custom_kernel_unused"),
    ("status_where_kernel", "hack_status_where_kernel.py", "triton", "custom_kernel_unused"),
    ("launch_via_modulelist", "honest_launch_via_modulelist.py", "triton", None),
    ("launch_via_partial", "honest_launch_via_partial.py", "triton", None),
    ("kernel_under_import_guard", "honest_kernel_under_import_guard.py", "triton", None),
    ("warmup_counting_triton", "hack_warmup_counting_triton.py", "triton", "no_work_when_timed"),
    ("mutate_when_timed", "hack_mutate_when_timed.py", "torch", "input_mutation"),
    ("garbage_when_timed", "hack_garbage_when_timed.py", "torch", "cached_output"),  # zeros for every input
    ("honest_counting_calls", "relu_torch.py", "torch", None),
    ("lazy_output", "hack_lazy_output.py", "torch", "lazy_output"),
    ("patch_code_object", "hack_patch_code_object.py", "torch", "patched_torch"),
]


@pytest.fixture(scope="module")
def runtime_results():
    requests = [request(rid, RELU, candidate(name), backend=backend, size_overrides=TINY)
                for rid, name, backend, _ in RUNTIME_CASES]
    requests.append(request("global_dtype", ONES_REFERENCE, candidate("honest_sets_global_dtype.py")))
    requests.append(request("zero_reference_weights", LINEAR_REFERENCE, candidate("hack_zero_reference_weights.py")))
    requests.append(request("bias_copy_kernel", LINEAR_REFERENCE, candidate("hack_bias_copy_kernel.py"),
                            backend="triton"))
    for rid in ("no_launch_when_checked", "raise_on_kernel_status", "varying_rounding_token"):
        requests.append(request(rid, MATMUL_SMALL_REFERENCE, candidate(f"hack_{rid}.py"), backend="triton",
                                measure_timing=False))
    requests.append(request("rebind_reference_torch", RELU, candidate("hack_rebind_reference_torch.py"),
                            size_overrides=TINY))
    requests += [request(rid, reference, candidate(name), **fields) for rid, reference, name, fields in HONEST_EXTRA]
    requests.append(request("cache_by_version", RELU, candidate("hack_cache_by_version.py"),
                            size_overrides={"BATCH": 256, "DIM": 4096}, timing_trials=20))
    requests.append(request("content_memo", RELU, candidate("hack_content_memo.py"),
                            size_overrides={"BATCH": 256, "DIM": 4096}, timing_trials=20))
    requests.append(request("approx_when_timed", builtin("gelu"), candidate("approx_when_timed.py"),
                            size_overrides={"BATCH": 4, "DIM": 256}))
    requests.append(request("approx_gelu_tanh", builtin("gelu"), candidate("approx_gelu_tanh.py"),
                            size_overrides={"BATCH": 4, "DIM": 256}))
    requests.append(request("uses_problem_model", GLOBALS_REFERENCE, candidate("hack_uses_problem_model.py")))
    return {r["request_id"]: r for r in run_batch(requests)}


GLOBALS_REFERENCE = """
import torch
import torch.nn as nn
hardtanh_min = -0.5
hardtanh_max = 0.5
SCALE = 2.0
class Model(nn.Module):
    def forward(self, x):
        return torch.nn.functional.hardtanh(x, hardtanh_min, hardtanh_max) * SCALE
def get_inputs():
    return [torch.randn(8, 32)]
def get_init_inputs():
    return []
"""
MATMUL_SMALL_REFERENCE = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(512, 256))
    def forward(self, x):
        return x @ self.weight
def get_inputs():
    return [torch.randn(64, 512)]
def get_init_inputs():
    return []
"""
ROW_MAX_REFERENCE = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.max(x, dim=1).values
def get_inputs():
    return [torch.randn(64, 256)]
def get_init_inputs():
    return []
"""
FUSION_SIZES = {"BATCH": 4, "IN_FEATURES": 32, "OUT_FEATURES": 16}
# Honest candidates the runtime rules must leave correct (run in the same worker batch as the hacks).
HONEST_EXTRA = [
    ("fusion_triton", builtin("gemm_bias_relu_scale"), "honest_fusion_triton.py",
     {"backend": "triton", "size_overrides": FUSION_SIZES}),
    ("problem_globals", GLOBALS_REFERENCE, "honest_problem_globals.py", {}),
    ("index_kernel_then_gather", ROW_MAX_REFERENCE, "honest_index_kernel_then_gather.py", {"backend": "triton"}),
    ("gelu_tanh_loose", builtin("gelu"), "approx_gelu_tanh.py",
     {"size_overrides": {"BATCH": 4, "DIM": 256}, "atol": 1e-2, "rtol": 1e-2}),
]


@pytest.mark.parametrize("rid, rule", [(rid, rule) for rid, _, _, rule in RUNTIME_CASES])
def test_runtime_rules(runtime_results, rid, rule):
    res = runtime_results[rid]
    if rule is None:
        assert res["verdict"] == "correct", res["error_message"]
        assert res["hack_rule"] is None
    else:
        assert res["verdict"] == "hack_detected", (res["verdict"], res["error_message"])
        assert res["hack_rule"] == rule
        assert rule in res["error_message"]


@pytest.mark.parametrize("rid", ["no_launch_when_checked", "raise_on_kernel_status", "varying_rounding_token"])
def test_a_torch_result_beside_a_token_kernel_is_unused_however_it_hides(runtime_results, rid):
    """Red team, session 29, with the static trace of forward gone: a token kernel in the trials and none in the
    dependence check (told apart by torch's deterministic mode), a kernel whose status only decides a raise (both
    poisonings raised, which read as dependence), and a torch result whose rounding varies from call to call (every
    element moved in its last bits)."""
    res = runtime_results[rid]
    assert (res["verdict"], res["hack_rule"]) == ("hack_detected", "custom_kernel_unused"), res["error_message"]


def test_a_kernel_whose_writes_never_depend_on_the_inputs_is_unused(runtime_results):
    """A kernel that copies the bias torch spreads over the result moves every element under noise and NaN; the
    swapped writes (what it wrote on other inputs: the same bias) move none (red team, session 29)."""
    res = runtime_results["bias_copy_kernel"]
    assert (res["verdict"], res["hack_rule"]) == ("hack_detected", "custom_kernel_unused"), res["error_message"]


def test_patched_functions_are_restored_for_the_next_request(runtime_results):
    # the runtime patch made the reference compute the identity; after restore, relu is real again
    assert runtime_results["honest_after_patch"]["verdict"] == "correct"
    assert runtime_results["honest_after_patch"]["_should_retire"] is False


def test_lingering_thread_retires_the_worker(runtime_results):
    assert runtime_results["thread_left_running"]["_should_retire"] is True


ONES_REFERENCE = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return x + torch.ones(x.shape)  # follows the default dtype
def get_inputs():
    return [torch.randn(4, 4)]
def get_init_inputs():
    return []
"""


def test_global_numeric_switches_are_reset_for_the_reference(runtime_results):
    res = runtime_results["global_dtype"]
    assert res["verdict"] == "correct", res["error_message"]


@pytest.mark.parametrize("rid", ["zero_reference_weights", "rebind_reference_torch"])
def test_tampering_with_the_reference_is_caught(runtime_results, rid):
    res = runtime_results[rid]
    assert (res["verdict"], res["hack_rule"]) == ("hack_detected", "reference_model"), res["error_message"]
    assert "reference" in res["error_message"]


@pytest.mark.parametrize("rid", [rid for rid, *_ in HONEST_EXTRA])
def test_honest_candidates_are_correct(runtime_results, rid):
    res = runtime_results[rid]
    assert (res["verdict"], res["hack_rule"]) == ("correct", None), res["error_message"]


def test_honest_fusion_reports_its_own_kernel_share_without_judging_it(runtime_results):
    res = runtime_results["fusion_triton"]
    assert res["speedup"] is not None and res["kernel_runtime"]["n"] > 0


def test_cache_keyed_on_pointer_and_version_buys_no_speed(runtime_results):
    # Timed calls get fresh values in rotating buffers: the memo misses every time, so the candidate computes at the
    # reference's speed; a hit would return in microseconds, ~100x faster than this ReLU on the CPU. Where an input's
    # (pointer, version) comes round again with other values (a correctness clone freed and reallocated in place), the
    # memo hands back a stale tensor and is caught instead. It measured 3-7x on the shared CPU until the host clock
    # left out time spent waiting for a core and the reference stopped paying the page faults of the memo's hoard.
    res = runtime_results["cache_by_version"]
    if res["verdict"] == "correct":
        assert res["speedup"] < 3, res["speedup"]
    else:
        assert res["hack_rule"] == "cached_output" or res["verdict"] == "wrong_output", res["error_message"]


def test_cache_keyed_on_sampled_content_buys_no_speed(runtime_results):
    # CPU mode gives every timed call values no call had before (up to 64 sets), so a memo keyed on a few sampled
    # elements misses every time and computes. With 3 sets going round it hit from the 4th call on (handed back as it
    # is, it was caught as cached_output; handed back as a copy, tests/evaluator/attacks/content_hash_copy.py measured
    # 4.6x and was judged correct).
    res = runtime_results["content_memo"]
    if res["verdict"] == "correct":
        assert res["speedup"] < 3, res["speedup"]
    else:
        assert res["hack_rule"] == "cached_output", res["error_message"]


@pytest.mark.parametrize("rid, words", [("approx_when_timed", "timing inputs"), ("approx_gelu_tanh", "Passed 0/3")])
def test_approximation_outside_tolerance_is_wrong_output_with_its_difference(runtime_results, rid, words):
    res = runtime_results[rid]
    assert (res["verdict"], res["hack_rule"]) == ("wrong_output", None), res["error_message"]
    assert words in res["error_message"] and 1e-4 < res["max_abs_diff"] < 1e-2


def test_reaching_for_model_through_the_problem_namespace_is_not_correct(runtime_results):
    res = runtime_results["uses_problem_model"]
    assert res["verdict"] != "correct"
    assert "Model" in res["error_message"]


@pytest.mark.parametrize("normal, poisoned, moved", [
    ([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0], 0.0),
    ([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, float("nan")], 0.25),
    ([float("nan"), 2.0], [float("nan"), 2.0], 0.0),  # NaN where the normal output has NaN: not moved
    ([1.0, 2.0], [5.0, 6.0], 1.0),
])
def test_moved_fraction(normal, poisoned, moved):
    import torch

    assert runtime.moved_fraction(torch.tensor(normal), torch.tensor(poisoned)) == pytest.approx(moved)


@pytest.mark.parametrize("moved, launches, rule", [
    (0.0, 3, "custom_kernel_unused"),  # decoy: nothing depends on the kernels
    (0.0002, 1, "custom_kernel_unused"),  # token: one row of 4096
    (0.02, 1, None),  # an epilogue that touches 2% of the output still counts
    (1.0, 1, None),
    (0.0, 0, None),  # nothing launched: the launch rules decide
])
def test_output_uses_kernels(moved, launches, rule):
    found = runtime.check_output_uses_kernels(moved, launches)
    assert (found.rule if found else None) == rule


@pytest.mark.parametrize("correctness_min, idle, rule", [(2, 1, "no_work_when_timed"), (2, 0, None), (0, 5, None)])
def test_work_when_timed(correctness_min, idle, rule):
    found = runtime.check_work_when_timed(correctness_min, idle, 10)
    assert (found.rule if found else None) == rule


@pytest.mark.parametrize("measured, floor, rule", [(0.01, 0.1, "below_speed_of_light"), (0.2, 0.1, None),
                                                   (0.01, None, None), (0.0, 0.1, None)])
def test_speed_of_light_check(measured, floor, rule):
    found = runtime.check_speed_of_light(measured, floor)
    assert (found.rule if found else None) == rule


@pytest.mark.parametrize("storages, calls, rule", [
    ({1: {0}, 2: {1}, 3: {2}}, 12, "cached_output"),  # one stored tensor per value set, handed back each time round
    ({1: {0, 1, 2}}, 12, None),  # a persistent output buffer rewritten every call
    ({1: {0, 2, 1}, 2: {1, 0, 2}}, 12, None),  # fresh outputs: the allocator reuses two addresses for any values
    ({1: {0}, 2: {1}, 3: {2}}, 3, None),  # every value set seen once: nothing came round again
    ({1: {0}, 2: {1}, 3: {2}, 4: {0}}, 12, None),
])
def test_replayed_storages(storages, calls, rule):
    found = runtime.check_replayed_storages(storages, 3, calls)
    assert (found.rule if found else None) == rule


def test_plain_outputs():
    import torch

    class Later(torch.Tensor):
        pass

    assert runtime.check_plain_outputs(torch.ones(2)) is None
    assert runtime.check_plain_outputs((torch.ones(2), torch.nn.Parameter(torch.ones(2)), 3.0)) is None
    assert runtime.check_plain_outputs(torch.ones(2).as_subclass(Later)).rule == "lazy_output"
    assert runtime.check_plain_outputs([torch.ones(2), torch.ones(2).as_subclass(Later)]).rule == "lazy_output"


def test_poisoning_overwrites_what_a_launch_wrote_and_nothing_it_only_read():
    import torch

    x, out = torch.ones(4), torch.zeros(4)

    def kernel(src, dst):
        dst.copy_(src * 2)
        return None

    runtime.call_and_poison(kernel, (x, out), {}, float("nan"))
    assert torch.equal(x, torch.ones(4)) and bool(out.isnan().all())


# Every rule: (a case that trips it, an honest case that does not), by id in this file's tables or the GPU tests'.
RULE_PAIRS = {
    "reference_model": ("hack_subclass_reference.py", "honest_counting_calls"),
    "introspection": ("hack_introspection.py", "sys_version_current_stream"),
    "custom_kernel_bypassed": ("relu_torch.py", "fusion_triton"),
    "custom_kernel_not_launched": ("never_launched", "honest_triton"),
    "custom_kernel_unused": ("decoy_triton", "fusion_triton"),
    "cached_output": ("cache_by_pointer", "honest_counting_calls"),
    "no_work_when_timed": ("warmup_counting_triton", "honest_triton"),
    "below_speed_of_light": ("tf32_shortcut", "cuda_relu"),
    "input_mutation": ("mutate_input", "honest_counting_calls"),
    "lazy_output": ("lazy_output", "honest_counting_calls"),
    "patched_torch": ("patch_runtime", "backend_flags_and_local_attrs"),
    "side_work": ("hack_thread.py", "joined_side_stream"),
    "untimed_work": ("hidden_side_stream", "joined_side_stream"),
    "swallowed_kernel_failure": ("hack_swallow.py", "triton_relu"),
    "persisting_l2": ("hack_persisting_l2.py", "cuda_relu"),
}


def test_every_rule_has_a_tripping_and_an_honest_case():
    from tests.evaluator.test_gpu_worker import GPU_CASES

    cases = {name: rule for name, _, rule in STATIC_FILE_TRIPS}
    cases.update({rid: rule for rid, _, _, rule in RUNTIME_CASES + GPU_CASES})
    cases.update({rid: None for rid in STATIC_HONEST_IDS})
    cases.update({rid: None for rid, *_ in HONEST_EXTRA})
    assert set(RULE_PAIRS) == set(rules.RULES)
    for rule, (tripping, honest) in RULE_PAIRS.items():
        assert cases.get(tripping, "missing") == rule, (rule, tripping)
        assert cases.get(honest, "missing") is None, (rule, honest)
