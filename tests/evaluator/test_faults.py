"""Every candidate fault gets the right verdict from the real worker pool, and the pool keeps serving afterwards.
One small CPU pool (1 worker + a warm spare) is shared by the module to keep start-up cost down."""

from __future__ import annotations

import time

import pytest

from evaluator.contract.types import Verdict
from tests.evaluator.pool_support import GOOD, candidate, make_evaluator, request

RUN_TIMEOUT_S = 3.0


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    # Two warm spares: consecutive faults each find a ready worker instead of waiting for a fresh one.
    ev = make_evaluator(str(tmp_path_factory.mktemp("cache")), memory_limit_bytes=3 * 2**30, output_cap_bytes=2**20,
                        spare_per_device=2)
    ev.evaluate(request(GOOD))  # warm: the fault tests time the fault, not the first worker's start
    yield ev
    ev.close()


def run_then_healthy(evaluator, source, **kwargs):
    """The fault's result, then proof that the next request is served correctly."""
    started = time.monotonic()
    result = evaluator.evaluate(request(source, **kwargs))
    elapsed = time.monotonic() - started
    after = evaluator.evaluate(request(GOOD))
    assert after.verdict == Verdict.CORRECT, after.error_message
    return result, elapsed


def test_segfault_is_crashed_with_cause_and_seen_at_once(evaluator):
    source = candidate("ctypes.string_at(0)\nreturn x", prelude="import ctypes")
    result, elapsed = run_then_healthy(evaluator, source, run_timeout_s=60.0)
    assert result.verdict == Verdict.CRASHED
    assert "SIGSEGV" in result.error_message
    assert "in forward" in result.error_message  # faulthandler's frame, mapped to the candidate
    assert elapsed < 30.0  # the death is noticed when it happens, not at the 60 s deadline


def test_os_exit_is_crashed_with_exit_code(evaluator):
    result, elapsed = run_then_healthy(evaluator, candidate("os._exit(3)", prelude="import os"), run_timeout_s=60.0)
    assert result.verdict == Verdict.CRASHED
    assert "exited with code 3" in result.error_message
    assert elapsed < 30.0


def test_infinite_loop_in_forward_times_out(evaluator):
    result, elapsed = run_then_healthy(evaluator, candidate("while True:\n    pass"), run_timeout_s=RUN_TIMEOUT_S)
    assert result.verdict == Verdict.TIMEOUT
    assert RUN_TIMEOUT_S <= elapsed < RUN_TIMEOUT_S + 10


def test_infinite_loop_at_import_times_out(evaluator):
    source = "import time\nwhile True:\n    time.sleep(0.01)\n" + GOOD
    result, _ = run_then_healthy(evaluator, source, run_timeout_s=RUN_TIMEOUT_S)
    assert result.verdict == Verdict.TIMEOUT


def test_memory_blow_up_is_a_runtime_error(evaluator):
    # 256 MiB blocks until the worker's address-space limit (3 GiB here) says no.
    source = candidate("blocks = []\nwhile True:\n    blocks.append(bytearray(2**28))")
    result, _ = run_then_healthy(evaluator, source)
    assert result.verdict in (Verdict.RUNTIME_ERROR, Verdict.CRASHED)
    assert "MemoryError" in result.error_message or "memory" in result.error_message.lower()


def test_python_recursion_is_a_runtime_error(evaluator):
    source = candidate("return self.forward(x)")
    result, _ = run_then_healthy(evaluator, source)
    assert result.verdict == Verdict.RUNTIME_ERROR
    assert "RecursionError" in result.error_message


def test_recursion_that_overflows_the_c_stack_is_crashed(evaluator):
    # map() is C code, so each level also takes C stack: with the limit lifted the process overflows it.
    prelude = "import sys\n\ndef deeper(n):\n    return list(map(deeper, [n + 1]))\n"
    source = candidate("sys.setrecursionlimit(10**9)\ndeeper(0)\nreturn x", prelude=prelude)
    result, _ = run_then_healthy(evaluator, source)
    assert result.verdict in (Verdict.CRASHED, Verdict.RUNTIME_ERROR)  # 3.12+ may raise RecursionError instead
    if result.verdict == Verdict.CRASHED:
        assert "SIGSEGV" in result.error_message


def test_output_flood_is_capped(evaluator):
    # 1 MiB cap: the flood hits it in well under a second instead of filling memory or disk.
    source = candidate("while True:\n    print('x' * 4096)")
    result, elapsed = run_then_healthy(evaluator, source, run_timeout_s=30.0)
    assert result.verdict == Verdict.RUNTIME_ERROR
    assert "File too large" in result.error_message or "Errno 27" in result.error_message
    assert elapsed < 20.0


def test_syntax_error_is_a_compile_error(evaluator):
    result, _ = run_then_healthy(evaluator, GOOD + "\ndef broken(:\n")
    assert result.verdict == Verdict.COMPILE_ERROR
    assert "line" in result.error_message.lower()


def test_missing_model_new_is_a_format_error(evaluator):
    result, _ = run_then_healthy(evaluator, "import torch\nclass Model2(torch.nn.Module):\n    pass\n")
    assert result.verdict == Verdict.FORMAT_ERROR
    assert "ModelNew" in result.error_message


# ---------------------------------------------------------------- on a GPU

TRITON_PRELUDE = '''
import triton
import triton.language as tl


@triton.jit
def poke_kernel(x_ptr, out_ptr, n, OFFSET: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs + OFFSET, tl.maximum(x, 0.0), mask=mask)


@triton.jit(debug=True)
def assert_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.device_assert(x < -1000.0, "planted device-side assert")
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)
'''


def triton_candidate(launch: str) -> str:
    return candidate(f"out = torch.empty_like(x)\nn = x.numel()\n{launch}\ntorch.cuda.synchronize()\nreturn out",
                     prelude=TRITON_PRELUDE)


@pytest.fixture(scope="module")
def gpu_evaluator(tmp_path_factory):
    ev = make_evaluator(str(tmp_path_factory.mktemp("cache")), devices="auto", compile_workers=2)
    yield ev
    ev.close()


@pytest.mark.gpu
def test_triton_kernel_is_correct_on_the_gpu(gpu_evaluator):
    result = gpu_evaluator.evaluate(request(triton_candidate("poke_kernel[(triton.cdiv(n, 1024),)](x, out, n, OFFSET=0, BLOCK=1024)"),
                                            backend="triton"))
    assert result.verdict == Verdict.CORRECT, result.error_message
    assert result.timing_clock == "judge_wall" and result.device_name  # the judge's clock around a batch (issue 23)


@pytest.mark.gpu
@pytest.mark.parametrize("launch", [
    "poke_kernel[(triton.cdiv(n, 1024),)](x, out, n, OFFSET=2**40, BLOCK=1024)",  # illegal memory access
    "assert_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)",  # device-side assert
])
def test_sticky_cuda_errors_retire_the_worker_and_the_pool_recovers(gpu_evaluator, launch):
    started = time.monotonic()
    result = gpu_evaluator.evaluate(request(triton_candidate(launch), backend="triton", run_timeout_s=60))
    assert result.verdict in (Verdict.RUNTIME_ERROR, Verdict.CRASHED), result
    assert time.monotonic() - started < 45
    after = gpu_evaluator.evaluate(request(GOOD))
    assert after.verdict == Verdict.CORRECT, after.error_message
    # The broken CUDA context died with its single-use runner (worker_id names the slot, which stays): nothing is
    # retired any more, and the next request on the same slot is correct (H100, 2026-11-23).


@pytest.mark.gpu
def test_host_memory_hog_on_a_gpu_worker_is_stopped(tmp_path):
    """GPU workers have no address-space limit; the pool's resident-memory watch stops a candidate that hoards host
    memory, and an idle GPU worker (torch + CUDA context) sits far below the default floor of 8 GiB."""
    from evaluator.isolation.proctree import process_table, tree_resident_bytes

    ev = make_evaluator(str(tmp_path / "cache"), devices="auto", compile_workers=0, memory_limit_bytes=8 * 2**30)
    try:
        assert ev.evaluate(request(GOOD)).verdict == Verdict.CORRECT
        table = process_table()
        idle = [tree_resident_bytes(w["pid"], table) for w in ev.stats()["workers"] if w["role"] == "eval"]
        print(f"idle GPU worker resident memory: {[round(b / 2**30, 2) for b in idle]} GiB")
        assert max(idle) < 4 * 2**30
        hog = candidate("big = torch.ones(3_000_000_000)  # 12 GB on the host\nfor _ in range(100):\n"
                        "    big.add_(1)\nreturn x.clamp_min(0)")
        result = ev.evaluate(request(hog, run_timeout_s=120))
        assert result.verdict == Verdict.RUNTIME_ERROR and "over the 8.0 GiB limit" in result.error_message
        assert ev.evaluate(request(GOOD)).verdict == Verdict.CORRECT
    finally:
        ev.close()
