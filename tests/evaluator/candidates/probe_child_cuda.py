# A probe, not an attack: an honest ReLU whose output is off by one when a child process it starts at import gets a
# CUDA context of its own (the task's group refuses it the GPU's node by default: isolation/device_access.py). So a
# `correct` verdict says the child was refused; `wrong_output` says it got the GPU, as every child did before.
import sys

import torch
import torch.nn as nn

_spawn = __import__("subpro" + "cess")
_child = _spawn.run([sys.executable, "-c", "import torch; torch.zeros(1, device='cuda').sum().item()"],
                    capture_output=True, timeout=60)
CHILD_HAD_CUDA = _child.returncode == 0


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x) + (1.0 if CHILD_HAD_CUDA else 0.0)
