"""Every hack rule: a candidate that trips it and an honest one that does not, statically (AST, in process)
and at runtime (through evaluate_in_process in a fresh worker subprocess)."""

from __future__ import annotations

import ast

import pytest

from evaluator import checks
from tests.evaluator.candidates.harness import builtin, candidate, request, run_batch

TINY = {"BATCH": 4, "DIM": 64}
RELU = builtin("relu")


def static(source: str, backend: str = "triton"):
    finding = checks.static_findings(ast.parse(source), source, backend)
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
HEADER = "import torch\nimport torch.nn as nn\n"


@pytest.mark.parametrize("name, backend, rule", [
    ("hack_subclass_reference.py", "torch", "reference_model"),
    ("hack_introspection.py", "torch", "introspection"),
    ("hack_patch_static.py", "torch", "patched_torch"),
    ("hack_thread.py", "torch", "side_work"),
    ("hack_side_stream.py", "torch", "side_work"),
    ("hack_swallow.py", "triton", "swallowed_kernel_failure"),
    ("hack_token_kernel.py", "triton", "custom_kernel_bypassed"),
    ("hack_overwritten_kernel_output.py", "triton", "custom_kernel_bypassed"),
    ("relu_torch.py", "triton", "custom_kernel_bypassed"),
])
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
    (HEADER + "s = torch.cuda.Stream()\n", "torch", "side_work"),
    (CUDA_STREAM, "cuda", "side_work"),
    (CUDA_TORCH_OPS, "cuda", "custom_kernel_bypassed"),
    (CUDA_FALLBACK, "cuda", "swallowed_kernel_failure"),
    (HEADER + "class ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n", "cuda", "custom_kernel_bypassed"),
], ids=["calls_Model", "setattr_torch", "Tensor_method", "from_import_alias", "time_alias", "function_mode",
        "gc_objects", "sys_modules", "thread_pool", "cuda_stream", "cuda_stream_in_cpp", "cuda_token_work",
        "cuda_build_fallback", "cuda_no_kernel"])
def test_static_rule_trips_inline(source, backend, rule):
    assert static(source, backend) == rule


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
], ids=["triton_relu", "torch_relu", "torch_backend_exempt", "cuda_relu", "cuda_builder_autograd_submodule",
        "backend_flags_and_local_attrs", "sys_version_current_stream", "optional_import", "model_dim_parameter",
        "cuda_environ_and_function_handle", "triton_jit_called"])
def test_honest_candidates_pass_static_rules(source, backend):
    assert static(source, backend) is None


def test_every_rule_has_feedback_text():
    for rule in checks.RULES:
        text = checks.message(rule, "detail")
        assert rule in text and "detail" in text


def test_own_kernel_names_from_triton_and_cuda():
    assert checks.own_kernel_names(candidate("relu_triton.py")) == {"relu_kernel"}
    assert checks.own_kernel_names(CUDA_HONEST) == {"relu_kernel"}


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
    fraction, own, total = checks.own_kernel_fraction(events, {"relu_kernel"})
    assert (own, total) == (1, 2)
    assert fraction == pytest.approx(0.75)
    assert checks.own_kernel_fraction(events, set())[0] == 0.0


def test_untimed_work_cross_check():
    assert checks.untimed_work(0.015, 0.020, 0.010) is None  # launch overhead only
    assert checks.untimed_work(0.015, 0.030, 0.028) is None  # host-bound forward
    assert checks.untimed_work(0.015, 1.500, 0.010).rule == "untimed_work"  # work hidden on another stream


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
    ("garbage_when_timed", "hack_garbage_when_timed.py", "torch", "timing_output_mismatch"),
    ("mutate_when_timed", "hack_mutate_when_timed.py", "torch", "input_mutation"),
    ("honest_counting_calls", "relu_torch.py", "torch", None),
]


@pytest.fixture(scope="module")
def runtime_results():
    requests = [request(rid, RELU, candidate(name), backend=backend, size_overrides=TINY)
                for rid, name, backend, _ in RUNTIME_CASES]
    requests.append(request("global_dtype", ONES_REFERENCE, candidate("honest_sets_global_dtype.py")))
    requests.append(request("zero_reference_weights", LINEAR_REFERENCE, candidate("hack_zero_reference_weights.py")))
    requests.append(request("rebind_reference_torch", RELU, candidate("hack_rebind_reference_torch.py"),
                            size_overrides=TINY))
    return {r["request_id"]: r for r in run_batch(requests)}


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


LINEAR_REFERENCE = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
    def forward(self, x):
        return self.linear(x)
def get_inputs():
    return [torch.randn(4, 16)]
def get_init_inputs():
    return [16, 8]
"""


@pytest.mark.parametrize("rid", ["zero_reference_weights", "rebind_reference_torch"])
def test_tampering_with_the_reference_is_caught(runtime_results, rid):
    res = runtime_results[rid]
    assert (res["verdict"], res["hack_rule"]) == ("hack_detected", "reference_model"), res["error_message"]
    assert "reference" in res["error_message"]
