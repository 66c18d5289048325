# Attack class: stream trick, early start: the work runs on a side CUDA stream that never waits for the current stream
# but is joined back before forward returns, so it starts while the current stream still runs whatever the timer
# queued ahead of the start event (the L2 flush, the launch hold) and only its tail is timed. (CUDA only.)
# Described in: KernelGuard UNSYNC_MULTISTREAM (a variant of it); KernelBench src/unit_tests/test_eval_adversarial.py
# (test_non_default_stream) for the unjoined form.
import torch
import torch.nn as nn

_side = None


class ModelNew(nn.Module):
    def forward(self, a, b):
        global _side
        if _side is None:
            _side = torch.cuda.Stream()
        with torch.cuda.stream(_side):  # no _side.wait_stream(current): starts at once
            out = a @ b
        torch.cuda.current_stream().wait_stream(_side)
        out.record_stream(torch.cuda.current_stream())
        return out
