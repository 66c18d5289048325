"""Probe (GPU): does a batch released from a device gate run slower while another process's stream waits behind a shut
gate of its own, or because the GPU sat idle before it? Usage: python tests/bench/probe_gate_sibling.py [--reps 30]"""
# Session 18 (one H200, 8 slots): in 72-77% of consecutive round pairs the side released first read slower than the
# side released second (median 1.4x), and the order alternates by round; on an H100 (session 17) both read alike.
# Two readings fit: the sibling's stream waiting on its gate keeps its context in the GPU's time slices, or the GPU's
# clocks ramp up after idling. Each scenario here separates them: alone, beside a waiting sibling, after idling, and
# beside a sibling whose gate opens first.
import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

CALLS = 500  # one launch a call, well under CUDA's ~1000 launches ahead of a waiting stream
ELEMENTS = 1 << 14


def queue_batch(gate, x):
    """CALLS launches queued behind this process's own gate; returns nothing (the batch runs once opened)."""
    shift = gate.gate.wait(gate.writer.next())
    for _ in range(CALLS):
        x.add_(shift)


def release(gate):
    """Opens this process's gate and waits for its batch: seconds on this process's clock."""
    import torch

    start = time.perf_counter()
    gate.writer.open(0.5)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def sibling(conn):
    import torch

    from evaluator.slot import device_gate

    gate = device_gate.own_gate()
    x = torch.zeros(ELEMENTS, device="cuda")
    busy = torch.rand(2048, 2048, device="cuda")
    while True:
        order = conn.recv()
        if order == "queue":
            queue_batch(gate, x)
            torch.cuda.current_stream().query()
            conn.send("queued")
        elif order == "open":
            conn.send(release(gate))
        elif order == "busy":  # ~20 ms of matrix products, not gated, then answer at once
            for _ in range(20):
                busy @ busy
            conn.send("busy")
        elif order == "sync":
            torch.cuda.synchronize()
            conn.send("synced")
        elif order == "stop":
            conn.send("stopped")
            return


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    import torch

    from evaluator.slot import device_gate

    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    child = ctx.Process(target=sibling, args=(there,), daemon=True)
    child.start()
    gate = device_gate.own_gate()
    x = torch.zeros(ELEMENTS, device="cuda")
    for _ in range(3):  # warm both
        queue_batch(gate, x)
        release(gate)
        here.send("queue"), here.recv(), here.send("open"), here.recv()

    def ask(order):
        here.send(order)
        return here.recv()

    times: dict[str, list[float]] = {}

    def note(name, seconds):
        times.setdefault(name, []).append(seconds * 1e3)

    for _ in range(args.reps):
        # Alone, right after other GPU work (warm clocks)
        queue_batch(gate, x)
        note("alone", release(gate))
        # Beside a sibling whose stream waits behind its own shut gate; then the sibling, released second
        ask("queue")
        queue_batch(gate, x)
        note("first_beside_waiting_sibling", release(gate))
        note("sibling_released_second", ask("open"))
        # The same pair the other way round: the sibling first, this process second
        ask("queue")
        queue_batch(gate, x)
        note("sibling_released_first", ask("open"))
        note("second_after_sibling", release(gate))
        # Alone after 100 ms of an idle GPU
        torch.cuda.synchronize()
        time.sleep(0.1)
        queue_batch(gate, x)
        note("alone_after_idle", release(gate))
        # Beside a sibling busy with ungated work
        ask("busy")
        queue_batch(gate, x)
        note("beside_busy_sibling", release(gate))
        ask("sync")
    ask("stop")
    summary = {name: {"median_ms": round(statistics.median(v), 4), "p25": round(sorted(v)[len(v) // 4], 4),
                      "p75": round(sorted(v)[(3 * len(v)) // 4], 4), "max": round(max(v), 4)}
               for name, v in times.items()}
    print(json.dumps({"device": torch.cuda.get_device_name(0), "calls": CALLS, "elements": ELEMENTS,
                      "reps": args.reps, "scenarios": summary}, indent=1))


if __name__ == "__main__":
    main()
