# Attack class: GPU work left running beside the judge's timing of the reference, kept short so the candidate's own
# batches pay next to nothing for it: honest outputs, and whenever the runner has been idle for 0.3 ms a thread keeps
# two ~0.1 ms spin kernels queued on a side stream, sleeping between launches (under the runner's CPU watch).
# Described in: our own probe of contexts sharing a GPU by time slices (session 25, tests/bench/probe_time_slices.py);
# NVIDIA's MPS documentation (without MPS, contexts of different processes are time-sliced). On an H200 it lost
# (0.58-0.70x): with one hardware queue per context its spins wait behind the runner's own gated batch.
import functools
import time

import torch
import torch.nn as nn

_threads = __import__("thread" + "ing")
LAST_CALL = [0.0]
CALLS = [0]
SPIN_CYCLES = 200_000  # ~0.1 ms at the H100's and H200's clocks
LIFETIME_S = 30.0


def _spin_when_idle():
    stream = torch.cuda.Stream()
    spin = getattr(torch.cuda, "_sle" + "ep")
    started = time.monotonic()
    while time.monotonic() - started < LIFETIME_S:
        if time.monotonic() - LAST_CALL[0] > 3e-4:
            with torch.cuda.stream(stream):
                spin(SPIN_CYCLES)
            time.sleep(SPIN_CYCLES / 4e9)  # about half a spin: two stay queued, no synchronisation
        else:
            time.sleep(1e-4)


class ModelNew(nn.Module):
    def forward(self, a, b):
        CALLS[0] += 1
        if CALLS[0] == 3:  # after the first correctness trials
            getattr(_threads, "Thr" + "ead")(target=functools.partial(_spin_when_idle), daemon=True).start()
        out = a @ b
        LAST_CALL[0] = time.monotonic()
        return out
