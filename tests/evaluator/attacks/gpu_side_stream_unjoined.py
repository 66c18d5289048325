# Attack class: stream trick: the work runs on a side CUDA stream that is never joined to the current stream, so the
# timing events on the current stream see almost nothing. (CUDA only.)
# Described in: KernelBench src/unit_tests/test_eval_adversarial.py (test_non_default_stream), KernelBench static
# checker (stream injection), KernelGuard UNSYNC_MULTISTREAM.
import torch
import torch.nn as nn

_side = None


class ModelNew(nn.Module):
    def forward(self, a, b):
        global _side
        if _side is None:
            _side = torch.cuda.Stream()
        with torch.cuda.stream(_side):
            return a @ b
