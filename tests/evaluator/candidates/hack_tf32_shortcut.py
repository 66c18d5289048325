"""An fp32 matmul computed with TF32 tensor cores. On small-integer inputs TF32 is exact, so it passes correctness;
it runs faster than the FP32 peak allows, which is what fp32 semantics promise: caught by the speed of light."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        torch.backends.cuda.matmul.allow_tf32 = True
        return torch.matmul(a, b)
