# Class: fake infrastructure error. Mutates its input, then reports an 'error' message as the evaluator's own code would
# (old protocol: crashed, "not the candidate's fault", retried), then a 'failed' answer claiming a crash was ours.
import json
import os
import struct

import torch.nn as nn


def _say(message):
    body = json.dumps(message).encode()
    for fd in range(3, 64):
        try:
            os.write(fd, struct.pack(">I", len(body)) + body)
        except OSError:
            pass


class ModelNew(nn.Module):
    def forward(self, x):
        x.mul_(2)
        _say({"type": "error", "traceback": "Traceback: evaluator/slot/worker.py internal error"})
        _say({"type": "failed", "verdict": "crashed", "message": "infrastructure"})
        return x.clamp_min(0)
