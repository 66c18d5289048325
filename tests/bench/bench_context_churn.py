"""Benchmark: CUDA contexts made and torn down a second on one GPU and on several at once, as the slot's runners do
(forked from a torch-importing parent, CUDA started in the child, optionally profiled once, exited).
Usage: python tests/bench/bench_context_churn.py --gpus 1,4 --lanes 8 --seconds 20"""

# Why: through one pool or Ray, 4 H100s of one host evaluated Triton tasks no faster than one (session 11, 52-67 a
# minute), with the load average at 65-100, the CPUs 80-90% idle and runners in uninterruptible sleep. Each task makes
# and ends a runner process with a context of its own; this times that alone. Per configuration: children a second,
# each child's CUDA start and whole life (fork to reaped, the context's teardown included), and the processes seen in
# uninterruptible sleep with the kernel functions they waited in.

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.bench.host_sampler import blocked_now  # noqa: E402


def child(gpu: int, profile: bool) -> None:
    """In a forked child of a parent that never initialised CUDA: this GPU only, a context, one kernel, optionally one
    profiled call (CUPTI attached, as a runner's kernel checks do), then exit."""
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)  # read at cuInit, which has not run in this process yet
    import torch

    started = time.perf_counter()
    values = torch.ones(1 << 20, device="cuda")
    values.add_(1)
    torch.cuda.synchronize()
    cuda_s = time.perf_counter() - started
    if profile:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as profiled

        with profiled(activities=[ProfilerActivity.CUDA]):
            values.add_(1)
            torch.cuda.synchronize()
    sys.stdout.write(f"{cuda_s:.6f}\n")
    sys.stdout.flush()
    os._exit(0)


def lane(gpu: int, profile: bool, until: float, report: int) -> None:
    """A single-threaded process that forks children one after another until `until`; one line per child to `report`:
    its CUDA start (s) and its life from fork to reaped (s)."""
    while time.monotonic() < until:
        read_end, write_end = os.pipe()
        began = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(read_end)
                os.dup2(write_end, 1)
                child(gpu, profile)
            finally:
                os._exit(1)  # never back into the lane's loop (no GPU here, or CUDA failed: the line reads nan)
        os.close(write_end)
        with os.fdopen(read_end) as answer:
            text = answer.read().strip()
        os.waitpid(pid, 0)
        life_s = time.perf_counter() - began
        os.write(report, f"{text or 'nan'} {life_s:.6f}\n".encode())
    os._exit(0)


def drained(fd: int) -> bytes:
    """What a non-blocking pipe holds now."""
    data = b""
    try:
        while True:
            more = os.read(fd, 65536)
            if not more:
                return data
            data += more
    except BlockingIOError:
        return data


def run(gpus: int, lanes: int, seconds: float, profile: bool) -> dict:
    read_end, write_end = os.pipe()
    until = time.monotonic() + seconds
    pids = []
    for gpu in range(gpus):
        for _ in range(lanes):
            pid = os.fork()
            if pid == 0:
                try:
                    os.close(read_end)
                    lane(gpu, profile, until, write_end)
                finally:
                    os._exit(1)
            pids.append(pid)
    os.close(write_end)
    samples, waits, chunks = [], collections.Counter(), []
    os.set_blocking(read_end, False)
    live = set(pids)
    while live:
        found = blocked_now()
        samples.append(sum(found.values()))
        waits.update(found)
        chunks.append(drained(read_end))
        live = {pid for pid in live if os.waitpid(pid, os.WNOHANG) == (0, 0)}
        time.sleep(0.25)
    chunks.append(drained(read_end))
    os.close(read_end)
    rows = [line.split() for line in b"".join(chunks).decode().splitlines() if line.strip()]
    cuda_s = [float(r[0]) for r in rows if r[0] != "nan"]
    life_s = [float(r[1]) for r in rows]

    def quantiles(values: list[float]) -> dict:
        if not values:
            return {}
        ordered = sorted(values)
        return {"median": round(statistics.median(ordered), 3), "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 3),
                "max": round(ordered[-1], 3)}

    return {"gpus": gpus, "lanes_per_gpu": lanes, "profiled": profile, "seconds": seconds, "children": len(rows),
            "children_per_s": round(len(rows) / seconds, 2), "failed": sum(1 for r in rows if r[0] == "nan"),
            "cuda_start_s": quantiles(cuda_s), "life_s": quantiles(life_s),
            "blocked_mean": round(statistics.fmean(samples), 1) if samples else None,
            "blocked_in": dict(waits.most_common(8))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", default="1,4", help="comma list of GPU counts (GPUs 0..N-1)")
    parser.add_argument("--lanes", type=int, default=8, help="children made one after another, per GPU, at once")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--profile", default="0,1", help="0: no profiler in the child, 1: one profiled call")
    args = parser.parse_args()
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # the parent never initialises CUDA, as the zygote
    import torch  # noqa: F401 - imported once here, as the zygote does, so a child pays only for its context

    for profile in (p.strip() == "1" for p in args.profile.split(",")):
        for count in (int(c) for c in args.gpus.split(",")):
            print(json.dumps(run(count, args.lanes, args.seconds, profile)), flush=True)


if __name__ == "__main__":
    main()
