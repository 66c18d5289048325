"""Probe (GPU): what the timed batch's harness costs beside the calls it times, in one quiet process: making a batch's
value sets (judge.nudged_batch) and projecting its outputs (slot/projection.py), step by step, against the calls.
Usage: python tests/bench/probe_harness.py [--sizes 65536,1048576,4194304] [--batch-ms 5]"""

# Why: in the slot's rounds each side is charged its batch (value sets made on the device, then the calls) and its
# hand-over (the projection of every output). For a 1M-element ReLU on an H100 the judge's harness was ~36 us of the
# ~44 us charged per call (session 15, call C), so a kernel twice as fast would read ~1.1x; the hand-overs of identical
# torch code varied 3.2-5.8 ms a round. Which step costs what, on the host and on the device, says what to make cheaper.

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

REPEATS = 9


def timed(step, torch) -> dict:
    """Median over REPEATS of the step's host time (its launches, up to before the synchronisation) and its whole
    time (through the synchronisation), in ms."""
    host, whole = [], []
    for _ in range(REPEATS):
        synchronise(torch)
        start = time.perf_counter()
        step()
        launched = time.perf_counter()
        synchronise(torch)
        done = time.perf_counter()
        host.append((launched - start) * 1e3)
        whole.append((done - start) * 1e3)
    return {"host_ms": round(statistics.median(host), 4), "whole_ms": round(statistics.median(whole), 4)}


def behind_gate(bases: list, calls: int, shift, torch) -> float:
    """Milliseconds of nudged_batch's work once a gate's shift is asked for (the draws are made before it)."""
    from evaluator.judging import judge

    marks = {}

    def opened():
        synchronise(torch)
        marks["from"] = time.perf_counter()
        return shift

    judge.nudged_in_bulk(bases, 7, calls, opened)  # the GPU path of nudged_batch, here on any device
    synchronise(torch)
    return (time.perf_counter() - marks["from"]) * 1e3


def synchronise(torch) -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def probe(size: int, batch_ms: float, device_name: str = "cuda") -> dict:
    import torch

    from evaluator.contract.framing import encode_message, pack_floats
    from evaluator.judging import judge
    from evaluator.slot.projection import allowed_differences, projections

    device = torch.device(device_name)
    bases = [[torch.randn(size, device=device)] for _ in range(2)]
    shift = torch.rand(1, device=device)
    # Calls: as many ReLUs as fill batch_ms (one call's time from a long warm batch), at most 1024 as the slot has it.
    x = bases[0][0]
    for _ in range(50):
        torch.relu(x)
    synchronise(torch)
    start = time.perf_counter()
    for _ in range(200):
        torch.relu(x)
    synchronise(torch)
    per_call_ms = (time.perf_counter() - start) * 1e3 / 200
    calls = max(3, min(1024, int(batch_ms / per_call_ms)))
    sets = judge.nudged_batch(bases, 7, calls, shift)
    outputs = [torch.relu(*values) for values in sets]
    figures = {"elements": size, "calls": calls, "relu_call_ms": round(per_call_ms, 5)}
    figures["calls_only"] = timed(lambda: [torch.relu(*values) for values in sets], torch)
    figures["nudged_batch"] = timed(lambda: judge.nudged_batch(bases, 7, calls, shift), torch)
    figures["nudged_behind_gate_ms"] = round(statistics.median(behind_gate(bases, calls, shift, torch)
                                                                for _ in range(REPEATS)), 4)
    figures["projections"] = timed(lambda: projections(outputs, 11), torch)
    figures["allowed_differences"] = timed(lambda: allowed_differences(outputs, 11, 1e-4, 1e-4), torch)
    # The projection's steps, as slot/projection.py takes them for one-shape outputs.
    stacked = torch.stack(outputs).float().reshape(len(outputs), -1)
    weights = torch.rand(outputs[0].shape, device=device).reshape(-1)
    figures["p_stack"] = timed(lambda: torch.stack(outputs).float().reshape(len(outputs), -1), torch)
    figures["p_abs_mv"] = timed(lambda: torch.mv(stacked.abs(), weights.abs()), torch)
    figures["p_sin_mv"] = timed(lambda: torch.mv(stacked.sin(), weights), torch)
    sums = torch.mv(stacked, weights)
    figures["p_to_host"] = timed(lambda: sums.double().cpu().tolist(), torch)
    listed = sums.double().cpu().tolist()
    figures["encode"] = timed(lambda: encode_message({"type": "handed", "projections": pack_floats(listed)}), torch)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="65536,1048576,4194304")
    parser.add_argument("--batch-ms", type=float, default=5.0)
    parser.add_argument("--device", default="cuda", help="'cpu': a plumbing check only")
    args = parser.parse_args()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"skipped": "no GPU"}))
        return
    for size in (int(s) for s in args.sizes.split(",")):
        print(json.dumps(probe(size, args.batch_ms, args.device)), flush=True)


if __name__ == "__main__":
    main()
