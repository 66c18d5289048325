"""Lazy optimisation (Dr. Kernel): the extension computes everything with ATen (cuBLAS for the GEMM) and then launches a
one-thread "post-processing" kernel that writes y[0] = y[0] * 1. Correct, at the library's speed; its own kernel does a
token share of the GPU time. The reward pays it less than an honest custom kernel at 0.8x (core/reward.py)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
__global__ void post_process_kernel(float* y) { y[0] = y[0] * 1.0f; }
torch::Tensor gemm_relu_scale(torch::Tensor x, torch::Tensor w, torch::Tensor b, double scale) {
    auto y = (at::relu(at::addmm(b, x, w.t())) * scale).contiguous();
    post_process_kernel<<<1, 1>>>(y.data_ptr<float>());
    return y;
}
"""
cpp_src = "torch::Tensor gemm_relu_scale(torch::Tensor x, torch::Tensor w, torch::Tensor b, double scale);"
ext = load_inline(name="krl_test_lazy_token_ext", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["gemm_relu_scale"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        return ext.gemm_relu_scale(x, self.linear.weight, self.linear.bias, self.scale)
