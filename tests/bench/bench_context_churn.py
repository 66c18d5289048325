"""Benchmark: CUDA contexts made and torn down a second on one GPU and on several at once, as the slot's runners do
(forked from a torch-importing parent, CUDA started in the child, optionally profiled once, exited).
With --victim, a long-lived process on GPU 0 times batches of small kernels (CUDA events, and its host clock around
each batch and its synchronisation) throughout, alone first, then beside the churn: does another process's context
coming and going move a timing it did not take part in?
Usage: python tests/bench/bench_context_churn.py --gpus 1,4 --lanes 8 --seconds 20 [--victim]"""

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


def victim(until: float, ready: int, report: int) -> None:
    """Times a batch of 200 small kernels again and again until `until` (events: device time, which for kernels this
    small is the host's launch pace; host clock: around the launches and the synchronisation; queued: events around
    the batch launched behind a device sleep) and writes the three lists, in ms, to `report` as one JSON line."""
    import torch

    values = torch.ones(4096, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    events_ms, host_ms, queued_ms = [], [], []
    os.write(ready, b"r")
    while True:
        began = time.perf_counter()
        start.record()
        for _ in range(200):
            values.add_(1e-6)
        end.record()
        end.synchronize()
        host_ms.append((time.perf_counter() - began) * 1e3)
        events_ms.append(start.elapsed_time(end))
        # The same batch queued behind ~2 ms of device sleep, as the slot's gated rounds queue theirs: its events see
        # the device's pace alone, not the host's launches.
        torch.cuda._sleep(4_000_000)
        start.record()
        for _ in range(200):
            values.add_(1e-6)
        end.record()
        end.synchronize()
        queued_ms.append(start.elapsed_time(end))
        if time.monotonic() >= until:
            break
    os.write(report, (json.dumps({"events_ms": events_ms[2:], "host_ms": host_ms[2:], "queued_ms": queued_ms[2:]})
                      + "\n").encode())
    os._exit(0)


def victim_figures(line: bytes) -> dict:
    """Quantiles of the victim's batches, and the share of them 1.5x or more above its own median."""
    found = json.loads(line or b"{}")
    figures = {}
    for key in ("events_ms", "host_ms", "queued_ms"):
        ordered = sorted(found.get(key) or [float("nan")])
        median = statistics.median(ordered)
        figures[key] = {"batches": len(ordered), "median": round(median, 4),
                        "p99": round(ordered[int(0.99 * (len(ordered) - 1))], 4), "max": round(ordered[-1], 4),
                        "share_over_1_5x": round(sum(v >= 1.5 * median for v in ordered) / len(ordered), 4)}
    return figures


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


def start_victim(until: float) -> tuple[int, int]:
    """The victim forked and ready (its CUDA started) before any lane: (pid, the read end of its report)."""
    ready_read, ready_write = os.pipe()
    report_read, report_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.environ["CUDA_VISIBLE_DEVICES"] = "0"
            victim(until, ready_write, report_write)
        finally:
            os._exit(1)
    os.close(ready_write)
    os.close(report_write)
    os.read(ready_read, 1)
    os.close(ready_read)
    return pid, report_read


def run(gpus: int, lanes: int, seconds: float, profile: bool, with_victim: bool = False) -> dict:
    # The victim starts first (its CUDA start is not timed) and times until the lanes' end; with no lanes it times a
    # quiet GPU.
    until = time.monotonic() + seconds + (3.0 if with_victim else 0.0)
    victim_pid, victim_report = start_victim(until) if with_victim else (0, -1)
    seconds = until - time.monotonic()
    read_end, write_end = os.pipe()
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
        found, _who = blocked_now()
        samples.append(sum(found.values()))
        waits.update(found)
        chunks.append(drained(read_end))
        live = {pid for pid in live if os.waitpid(pid, os.WNOHANG) == (0, 0)}
        time.sleep(0.25)
    chunks.append(drained(read_end))
    os.close(read_end)
    beside = {}
    if with_victim:
        with os.fdopen(victim_report, "rb") as report:
            beside = victim_figures(report.readline())
        os.waitpid(victim_pid, 0)
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
            "blocked_in": dict(waits.most_common(8)), "victim": beside}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", default="1,4", help="comma list of GPU counts (GPUs 0..N-1)")
    parser.add_argument("--lanes", type=int, default=8, help="children made one after another, per GPU, at once")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--profile", default="0,1", help="0: no profiler in the child, 1: one profiled call")
    parser.add_argument("--victim", action="store_true", help="a process timing small kernels beside the churn")
    args = parser.parse_args()
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # the parent never initialises CUDA, as the zygote
    import torch  # noqa: F401 - imported once here, as the zygote does, so a child pays only for its context

    if args.victim:  # the victim alone: its quiet figures
        print(json.dumps(run(1, 0, args.seconds, False, with_victim=True)), flush=True)
    for profile in (p.strip() == "1" for p in args.profile.split(",")):
        for count in (int(c) for c in args.gpus.split(",")):
            print(json.dumps(run(count, args.lanes, args.seconds, profile, args.victim)), flush=True)


if __name__ == "__main__":
    main()
