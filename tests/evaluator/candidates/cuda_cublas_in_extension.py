"""Honest: the extension itself calls cuBLAS (through at::addmm) and then its own epilogue kernel."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
__global__ void relu_scale_kernel(float* __restrict__ y, float scale, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = (y[i] > 0.f ? y[i] : 0.f) * scale;
}
torch::Tensor gemm_relu_scale(torch::Tensor x, torch::Tensor w, torch::Tensor b, double scale) {
    auto y = at::addmm(b, x, w.t()).contiguous();
    long n = y.numel();
    relu_scale_kernel<<<(n + 255) / 256, 256>>>(y.data_ptr<float>(), (float)scale, n);
    return y;
}
"""
cpp_src = "torch::Tensor gemm_relu_scale(torch::Tensor x, torch::Tensor w, torch::Tensor b, double scale);"
ext = load_inline(name="krl_test_cublas_ext", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["gemm_relu_scale"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        return ext.gemm_relu_scale(x, self.linear.weight, self.linear.bias, self.scale)
