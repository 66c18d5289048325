"""Benchmark: the host cost per call of a timed batch in a process set up as a slot runner is, against a plain one.
Identical torch code read ~0.7-0.86x in the slot (docs/known-gaps.md); this times the same batch under each runner
trait alone. Usage: python tests/bench/bench_runner_overhead.py [--repeats 2] (GPU; prints one JSON line per run)."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

# Each condition: one runner trait, applied before CUDA is first used, as the runner applies it.
CONDITIONS = ("plain", "profiled", "profiled_teardown", "seccomp_prctl", "seccomp_spec_allow", "forked")
CALLS, BATCHES = 80, 40
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_SPEC_ALLOW = 1, 4


def _speculation() -> str:
    """The kernel's speculative-store-bypass state for this process (a seccomp filter may force it on)."""
    with open("/proc/self/status") as handle:
        return next((line.split(":", 1)[1].strip() for line in handle if line.startswith("Speculation_Store")), "?")


def _seccomp_spec_allow(program: bytes) -> None:
    """The runner's BPF loaded through seccomp(2) with SPEC_ALLOW (prctl cannot pass flags)."""
    from evaluator.isolation import pid_filter

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pid_filter.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = pid_filter._SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if libc.syscall(317, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_SPEC_ALLOW, ctypes.byref(fprog)) != 0:
        raise OSError(ctypes.get_errno(), "seccomp(SPEC_ALLOW) failed")


def measure(condition: str) -> dict:
    """Per-call microseconds of BATCHES batches of CALLS ReLUs on fresh nudged sets (the slot's batch), median."""
    import torch

    from evaluator.judging import judge, timing

    if condition.startswith("seccomp"):
        from evaluator.isolation import pid_filter
        from evaluator.isolation.syscall_filter import filter_bpf

        program = filter_bpf()
        if condition == "seccomp_prctl":
            pid_filter.load_program(program)
        else:
            _seccomp_spec_allow(program)
    device = torch.device("cuda")
    bases = [[torch.randn(16, 16384, device=device)] for _ in range(2)]
    if condition.startswith("profiled"):
        timing.profiler_events(lambda: torch.relu(bases[0][0]), cpu=True)
        if condition == "profiled_teardown":
            os.environ[timing.CUPTI_TEARDOWN_ENV] = "1"
            timing.release_cupti()
    per_call = []
    for batch in range(BATCHES + 5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        sets = judge.nudged_batch(bases, batch, CALLS)
        outputs = [torch.relu(*values) for values in sets]
        torch.cuda.synchronize()
        if batch >= 5:
            per_call.append((time.perf_counter() - start) / CALLS * 1e6)
        del outputs, sets
    return {"condition": condition, "us_per_call_median": round(statistics.median(per_call), 2),
            "us_per_call_min": round(min(per_call), 2), "speculation_store_bypass": _speculation()}


def child(condition: str) -> None:
    if condition == "forked":  # a zygote's child: torch imported before the fork, CUDA first used after it
        import torch  # noqa: F401

        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            os.write(write_end, json.dumps(measure(condition)).encode())
            os._exit(0)
        os.close(write_end)
        chunks = []
        while chunk := os.read(read_end, 65536):
            chunks.append(chunk)
        os.waitpid(pid, 0)
        print(b"".join(chunks).decode(), flush=True)
        return
    print(json.dumps(measure(condition)), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    for line in open("/sys/devices/system/cpu/vulnerabilities/spec_store_bypass"):
        print("spec_store_bypass:", line.strip())
    print("kernel:", os.uname().release)
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    for _ in range(args.repeats):
        for condition in CONDITIONS:
            done = subprocess.run([sys.executable, __file__, "--child", condition], env=env, capture_output=True,
                                  text=True, timeout=120)
            print(done.stdout.strip() or f'{{"condition": "{condition}", "error": {json.dumps(done.stderr[-300:])}}}',
                  flush=True)


if __name__ == "__main__":
    main()
