"""What `krl serve`'s results store costs per request: accepting (one transaction, fsync'd, before the 202) and
storing a result (one transaction with eviction), on a real file, with the pool tests' request and a real-sized
result; plus the file's size per kept result. Prints figures, no asserts."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from evaluator.api import EvalResult, RuntimeStats, Verdict  # noqa: E402
from evaluator.scale.result_store import ResultStore, result_row  # noqa: E402
from tests.evaluator.pool_support import GOOD, request  # noqa: E402


def _result(request_id: str) -> str:
    stats = RuntimeStats(median_ms=0.12, mean_ms=0.13, std_ms=0.01, min_ms=0.11, max_ms=0.2, iqr_ms=0.02, n=100)
    return result_row(EvalResult(request_id=request_id, problem_id="test/relu", verdict=Verdict.CORRECT,
                                 compiled=True, correctness_trials_passed=5, correctness_trials_total=5,
                                 kernel_runtime=stats, reference_runtime=stats, speedup=1.0,
                                 phase_times_s={"compile": 0.1, "correctness": 0.2, "timing": 0.3},
                                 worker_id="e1-cpu").to_dict())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=500, help="requests accepted and finished one by one")
    parser.add_argument("--batch", type=int, default=100, help="requests in one batch acceptance")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "results.sqlite")
        store = ResultStore(path, keep_results=args.n)
        body = json.dumps(request(GOOD).to_dict())
        accept_ms, finish_ms = [], []
        for index in range(args.n):
            started = time.perf_counter()
            store.accept([(f"r{index}", "fp", body)])
            accept_ms.append((time.perf_counter() - started) * 1000)
        for index in range(args.n):
            result = _result(f"r{index}")
            started = time.perf_counter()
            store.finish(f"r{index}", result)
            finish_ms.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        store.accept([(f"b{index}", "fp", body) for index in range(args.batch)])
        batch_ms = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        for index in range(args.n):
            store.get(f"r{index}")
        get_ms = (time.perf_counter() - started) * 1000 / args.n
        store.close()
        size = sum(os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder))
    print(f"request JSON {len(body)} B, result JSON {len(_result('r0'))} B, synchronous=FULL, WAL")
    print(f"accept one      median {statistics.median(accept_ms):7.2f} ms   p95 "
          f"{sorted(accept_ms)[int(0.95 * len(accept_ms))]:7.2f} ms   ({args.n} requests)")
    print(f"store a result  median {statistics.median(finish_ms):7.2f} ms   p95 "
          f"{sorted(finish_ms)[int(0.95 * len(finish_ms))]:7.2f} ms")
    print(f"accept a batch of {args.batch}: {batch_ms:.1f} ms (one transaction)")
    print(f"look up a finished id: {get_ms:.3f} ms")
    print(f"files on disk after {args.n} finished + {args.batch} unfinished: {size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
