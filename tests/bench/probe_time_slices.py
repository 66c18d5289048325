"""Probe (GPU): does a one-thread spin kernel left running by another process slow this process's batch, and does a
probe kernel reading the GPU's global timer see the time slices? Usage: python tests/bench/probe_time_slices.py"""
# Why (session 24): the runner's watch around the judge's reference timing reads CPU time only, and a candidate's
# thread can relaunch `torch.cuda._sleep` spins on a side stream for microseconds of CPU
# (tests/evaluator/attacks/gpu_spin_beside_reference.py). Contexts of different processes share a GPU by time slices,
# so the judge's reference may be slowed by the spin. If so, a one-block probe beside the timed batch that reads
# %globaltimer in a loop should see a gap whenever another context holds the device: a check of the timed window
# itself. Each scenario prints one JSON line: the batch's milliseconds (CUDA events) and the probe's largest gap and
# count of gaps over gap_probe.GAP_NS, alone and beside a spinning process. Since session 25 it runs the judge's own
# probe (evaluator/slot/gap_probe.py); call A ran a copy of its kernel that also recorded its span. Session 26: honest
# tasks at 8 slots had gapped windows (39 of 48 Triton tasks, gaps up to 2.8 ms), so --neighbours puts the batch beside
# what a slot's window has around it instead: streams waiting at a shut device gate, idle contexts, contexts churning
# (none gapped a batch, call C), and a process running a tiny kernel every millisecond (not run yet).
import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

def spinner(ready, stop, cycles: int) -> None:
    """Another process: spin kernels of `cycles` on a side stream, relaunched whenever the last one ends, sleeping
    meanwhile (the attack's pattern), until told to stop."""
    import torch

    stream = torch.cuda.Stream()
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    ready.set()
    while not stop.is_set():
        with torch.cuda.stream(stream):
            torch.cuda._sleep(cycles)
        time.sleep(cycles / 2.5e9)


def gate_waiter(ready, stop, _cycles: int) -> None:
    """Another process with a batch queued behind a shut device gate (slot/device_gate.py), as every other slot's
    judge and runner have while one slot holds the device: does a stream waiting on a page take time slices?"""
    import ctypes
    import mmap

    import torch

    from evaluator.slot.device_gate import PAGE_BYTES, DeviceGate, GateWriter

    page = mmap.mmap(-1, PAGE_BYTES)
    gate = DeviceGate(ctypes.addressof(ctypes.c_char.from_buffer(page)), read_only=False)
    writer = GateWriter(page)
    x = torch.randn(256, 256, device="cuda")
    x @ x  # cuBLAS's set-up done before the gate: queued behind it, it would wait there (session 26, call B)
    torch.cuda.synchronize()
    gate.wait(writer.next())
    x @ x
    ready.set()
    stop.wait()
    writer.open(0.5)
    torch.cuda.synchronize()


def idle_context(ready, stop, _cycles: int) -> None:
    """Another process with a CUDA context and nothing queued (a warmed spare runner, another slot's judge)."""
    import torch

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    ready.set()
    stop.wait()


def context_churn(ready, stop, _cycles: int) -> None:
    """Another process whose children make a CUDA context, run one kernel and end, one after another (spares warming,
    runners ending)."""
    import subprocess

    program = "import torch; torch.ones(1, device='cuda').add_(1); torch.cuda.synchronize()"
    subprocess.run([sys.executable, "-c", program], check=True)
    ready.set()
    while not stop.is_set():
        subprocess.run([sys.executable, "-c", program], check=False)


def ticker(ready, stop, _cycles: int) -> None:
    """Another process launching one tiny kernel every millisecond and waiting for it: a neighbour's short GPU steps
    (a spare's warm-up, a runner's draws finishing after its answer), each a switch of the device's context."""
    import torch

    x = torch.zeros(1, device="cuda")
    x.add_(1)
    torch.cuda.synchronize()
    ready.set()
    while not stop.is_set():
        x.add_(1)
        torch.cuda.synchronize()
        time.sleep(1e-3)


NEIGHBOURS = {"spinner": spinner, "gate": gate_waiter, "idle": idle_context, "churn": context_churn, "tick": ticker}


def one_batch(torch, probe, op, calls: int, probed: bool, pause_s: float = 0.0) -> dict:
    """A batch of `calls` of `op` on the current stream, timed with events, after `pause_s` of an idle device; with
    `probed`, the judge's gap probe (evaluator/slot/gap_probe.py) runs beside it, started before the batch and ended
    after it."""
    torch.cuda.synchronize()
    time.sleep(pause_s)
    if probed:
        probe.start()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        op()
    end.record()
    if probed:
        probe.end()
    torch.cuda.synchronize()
    gaps = probe.read() if probed else None
    return {"batch_ms": start.elapsed_time(end), "largest_gap_us": gaps.largest_ns / 1e3 if gaps else 0.0,
            "gaps": gaps.count if gaps else 0}


def scenario(torch, probe, op, calls: int, reps: int, probed: bool, pause_s: float = 0.0) -> dict:
    rows = [one_batch(torch, probe, op, calls, probed, pause_s) for _ in range(reps)]
    return {"batch_ms_median": round(statistics.median(r["batch_ms"] for r in rows), 4),
            "largest_gap_us_median": round(statistics.median(r["largest_gap_us"] for r in rows), 2),
            "largest_gap_us_max": round(max(r["largest_gap_us"] for r in rows), 2),
            "batches_with_gaps": sum(r["gaps"] > 0 for r in rows), "reps": reps}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--spin-cycles", default="400000,4000000", help="each spinner's kernel length, in cycles")
    parser.add_argument("--neighbours", default="spinner",
                        help="comma-separated KIND[xN] (spinner, gate, idle, churn, tick): the other processes of each "
                             "scenario, e.g. gatex7; a spinner scenario runs once per --spin-cycles")
    parser.add_argument("--pauses-ms", default="",
                        help="comma-separated idle times before each batch, alone: the device's clocks fall while it "
                             "idles, as between a slot's windows (matrix products, then small ReLU calls)")
    args = parser.parse_args()
    import torch

    from evaluator.slot.gap_probe import GapProbe

    probe = GapProbe()
    x, small = torch.randn(args.size, args.size, device="cuda"), torch.randn(1 << 20, device="cuda")
    products, relus = (lambda: x @ x), (lambda: small.relu())
    for probed in (False, True):  # warm both paths: the probe's compile, cuBLAS
        one_batch(torch, probe, products, args.calls, probed)
        one_batch(torch, probe, relus, args.calls, probed)
    for probed in (False, True):
        print(json.dumps({"scenario": "alone", "probed": probed,
                          **scenario(torch, probe, products, args.calls, args.reps, probed)}), flush=True)
    for pause_ms in (float(p) for p in args.pauses_ms.split(",") if p):
        for name, op, calls in (("products", products, args.calls), ("relu calls", relus, 20 * args.calls)):
            print(json.dumps({"scenario": f"alone, {name} after {pause_ms:g} ms idle", "probed": True,
                              **scenario(torch, probe, op, calls, args.reps, True, pause_ms / 1e3)}), flush=True)
    if not args.neighbours:
        return
    context = mp.get_context("spawn")
    for spec in args.neighbours.split(","):
        kind, _, count = spec.partition("x")
        for cycles in ([int(c) for c in args.spin_cycles.split(",")] if kind == "spinner" else [0]):
            label = f"beside {count or 1} {kind}" + (f" of {cycles} cycles" if kind == "spinner" else "")
            beside(torch, probe, x, args, context, NEIGHBOURS[kind], int(count or 1), cycles, label)


def beside(torch, probe, x, args, context, target, count: int, cycles: int, label: str) -> None:
    """The batch alone-measured scenarios again with `count` processes running `target` alongside."""
    stop = context.Event()
    processes, readies = [], []
    for _ in range(count):
        ready = context.Event()
        process = context.Process(target=target, args=(ready, stop, cycles), daemon=True)
        process.start()
        processes.append(process)
        readies.append(ready)
    try:
        if all(ready.wait(120) for ready in readies):
            for probed in (False, True):
                print(json.dumps({"scenario": label, "probed": probed,
                                  **scenario(torch, probe, lambda: x @ x, args.calls, args.reps, probed)}), flush=True)
        else:
            print(json.dumps({"scenario": label, "error": "a neighbour did not start"}), flush=True)
    finally:
        stop.set()
        for process in processes:
            process.join(20)

if __name__ == "__main__":
    main()
