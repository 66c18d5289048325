"""Speed-of-light fraction of every built-in problem's reference at its `gpu_sizes`, measured through the real
evaluator (candidate = the reference's own code under another class name): also a check that no honest reference
is judged below the speed of light. Usage: python tests/bench/bench_sol.py [problem ...] (needs a GPU)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.evaluator.candidates.harness import BUILTIN, request, run_batch  # noqa: E402


def as_candidate(reference_source: str) -> str:
    return re.sub(r"\bclass Model\(", "class ModelNew(", reference_source)


def main(argv: list[str]) -> int:
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: run this on a GPU machine")
        return 1
    index = yaml.safe_load((BUILTIN / "index.yaml").read_text())
    stems = argv or list(index)
    requests = []
    for stem in stems:
        source = (BUILTIN / f"{stem}.py").read_text()
        requests.append(request(stem, source, as_candidate(source), size_overrides=dict(index[stem].get("gpu_sizes") or {}),
                                correctness_trials=2, timing_trials=30, warmup_trials=3))
    results = run_batch(requests, device="cuda:0", timeout_s=560)
    print(f"device: {results[0]['gpu_name']}, fp32, reference timed against itself through the evaluator")
    print(f"{'problem':26s} {'verdict':14s} {'kernel ms':>10s} {'SOL ms':>9s} {'SOL frac':>9s}")
    fractions = []
    for res in results:
        kernel = (res.get("kernel_runtime") or {}).get("median_ms")
        sol_ms, fraction = res.get("sol_time_ms"), res.get("sol_fraction")
        verdict = res["verdict"] + (f"/{res['hack_rule']}" if res.get("hack_rule") else "")
        if fraction:
            fractions.append(fraction)
        print(f"{res['problem_id']:26s} {verdict:14s} {kernel or float('nan'):10.4f} {sol_ms or float('nan'):9.4f} "
              f"{fraction or float('nan'):9.3f}")
        if res["verdict"] != "correct":
            print("    ", res["error_message"][:300].replace("\n", " "))
    if fractions:
        fractions.sort()
        print(f"SOL fraction over {len(fractions)} references: min {fractions[0]:.3f}, "
              f"median {fractions[len(fractions) // 2]:.3f}, max {fractions[-1]:.3f}")
    print(f"correct: {sum(r['verdict'] == 'correct' for r in results)}/{len(results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
