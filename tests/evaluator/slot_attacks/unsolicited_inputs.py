# Class: unsolicited requests. Asks the judge for 60 input sets nobody scheduled (old protocol: each one a reference
# run, an output held in the judge's memory and a file on the host's disk).
import json
import os
import struct

import torch.nn as nn

for index in range(60):
    body = json.dumps({"type": "inputs", "name": f"timing-{index}"}).encode()
    for fd in range(3, 64):
        try:
            os.write(fd, struct.pack(">I", len(body)) + body)
        except OSError:
            pass


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)
