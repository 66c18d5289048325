# Attack class: reach the reference module through sys.modules and run its Model.
# Described in: KernelGuard SYS_MODULES_ACCESS.
import torch
import torch.nn as nn

_s = __import__("s" + "ys")


class ModelNew(nn.Module):
    def forward(self, x):
        for mod in list(getattr(_s, "mod" + "ules").values()):
            model = getattr(mod, "Model", None)
            if isinstance(model, type) and issubclass(model, nn.Module):
                return model()(x)
        return x.abs()
