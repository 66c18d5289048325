"""Both speedup conventions side by side on a GPU: each problem's reference evaluated as its own candidate (the
self-speedup, ~1 in a sound convention) and any candidate files given, with the judge's device-time speedup, the
KernelBench-convention speedup and their ratio. Prints a table; never asserts.

    python3 tests/bench/bench_timing_conventions.py [--problems DIR_OR_FILES...] [--candidates DIR] [--trials 100]
With KERNELBENCH_ROOT set, --problems level1 / level2 take the first --limit files of that level."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.evaluator.candidates.harness import BUILTIN, request, run_batch  # noqa: E402


def problem_files(spec: list[str], limit: int) -> list[Path]:
    files: list[Path] = []
    for item in spec:
        if item in ("level1", "level2", "level3"):
            root = Path(os.environ["KERNELBENCH_ROOT"]) / "KernelBench" / item
            files += sorted(root.glob("*.py"), key=lambda p: int(p.name.split("_")[0]))[:limit]
        elif Path(item).is_dir():
            files += sorted(Path(item).glob("*.py"))[:limit]
        else:
            files.append(Path(item))
    return files


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", nargs="*", default=[str(BUILTIN / f"{n}.py") for n in
                                                           ("relu", "softmax", "gemm_bias_relu_scale", "layernorm")])
    parser.add_argument("--candidates", default="", help="folder of <problem stem>.py candidates (torch backend)")
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--limit", type=int, default=8)
    args = parser.parse_args()
    requests = []
    for path in problem_files(args.problems, args.limit):
        source = path.read_text()
        requests.append(request(f"self:{path.stem}", source, source.replace("class Model(", "class ModelNew("),
                                timing_trials=args.trials, warmup_trials=10))
        mine = Path(args.candidates) / path.name if args.candidates else None
        if mine and mine.exists():
            requests.append(request(f"cand:{path.stem}", source, mine.read_text(), backend=args.backend,
                                    timing_trials=args.trials, warmup_trials=10))
    results = run_batch(requests, device="cuda:0", timeout_s=3600)
    print(f"{'case':48} {'verdict':14} {'judge':>8} {'kernelbench':>12} {'kb/judge':>9}")
    for r in results:
        judge, kb = r.get("speedup"), r.get("speedup_kernelbench")
        ratio = f"{kb / judge:9.3f}" if judge and kb else f"{'-':>9}"
        print(f"{r['request_id'][:48]:48} {r['verdict']:14} {judge or 0:8.3f} {kb or 0:12.3f} {ratio}")
    print("device:", results[0].get("gpu_name") if results else "-")


if __name__ == "__main__":
    main()
