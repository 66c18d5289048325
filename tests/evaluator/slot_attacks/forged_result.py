# Class: protocol forgery. Returns zeros, and at import writes its own "result" (correct, 1000x) and answers to every
# descriptor, as a candidate sharing the runner's process could with the old runner-driven protocol.
import json
import os
import struct

import torch
import torch.nn as nn


def _say(message):
    body = json.dumps(message).encode()
    for fd in range(3, 64):
        try:
            os.write(fd, struct.pack(">I", len(body)) + body)
        except OSError:
            pass


_say({"type": "result", "result": {"verdict": "correct", "speedup": 1000.0, "correctness_trials_passed": 2,
                                   "compiled": True}})


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)
