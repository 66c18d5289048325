"""Benchmark (GPU): the attacks that work beside the reference (tests/evaluator/attacks/gpu_*_beside_reference.py) and
the honest matmul through the real evaluator, with the judge's gap probe off and on. Usage: python bench_spin_attacks.py"""
# One JSON line per (probe, candidate): verdict, both conventions' speedups, the probe's figures (gapped rounds, the
# largest gap), the CPU watch's interfered rounds, the runner's freezing (KRL_WORKER_FREEZE_RUNNER, on unless "0") and
# its group's refusal of the GPU's nodes (KRL_WORKER_GPU_OPENS_DENIED: every process but the runner by default), both
# from the environment. One slot: the attack's only neighbour is the judge itself.
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from evaluator.contract.types import EvalRequest  # noqa: E402
from evaluator.isolation.device_access import DENY_ENV  # noqa: E402
from evaluator.slot.gap_probe import PROBE_ENV  # noqa: E402
from evaluator.slot.reference_watch import FREEZE_ENV  # noqa: E402
from tests.evaluator.candidates.harness import matmul_reference  # noqa: E402
from tests.evaluator.pool_support import make_evaluator  # noqa: E402

ATTACKS = Path(__file__).resolve().parents[1] / "evaluator" / "attacks"
CANDIDATES = ("honest_matmul", "gpu_short_spins_beside_reference", "gpu_child_spins_beside_reference",
              "gpu_ticking_child_beside_reference", "gpu_lean_ticking_child_beside_reference",
              "gpu_child_spins_through_reference_windows")
PHASES = ("timing_gapped_rounds", "timing_gap_largest_ms", "timing_interfered_rounds", "timing_freeze",
          "timing_unfrozen_windows")


def run(probe: str, size: int, repeats: int) -> None:
    os.environ[PROBE_ENV] = probe
    requests = [EvalRequest(problem_id="bench/gpu_matmul", reference_source=matmul_reference(size),
                            candidate_source=(ATTACKS / f"{name}.py").read_text(), correctness_trials=3,
                            timing_trials=50, warmup_trials=5, kernelbench_timing=True,
                            request_id=f"{name}#{index}")
                for index in range(repeats) for name in CANDIDATES]
    with tempfile.TemporaryDirectory() as cache, \
            make_evaluator(cache, devices="auto", workers_per_device=1, spare_per_device=1) as evaluator:
        for result in evaluator.evaluate_many(requests):
            phases = result.phase_times_s
            print(json.dumps({"probe": probe, "freeze": os.environ.get(FREEZE_ENV, "1"),
                              "opens_denied": os.environ.get(DENY_ENV, "runner"), "candidate": result.request_id,
                              "verdict": result.verdict.value,
                              "rule": result.hack_rule, "speedup": result.speedup,
                              "speedup_kernelbench": result.speedup_kernelbench,
                              **{name: phases.get(name) for name in PHASES},
                              "error": (result.error_message or "")[:200]}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--probe", default="0,1", help="the gap probe's settings to run, in order")
    args = parser.parse_args()
    for probe in args.probe.split(","):
        run(probe, args.size, args.repeats)


if __name__ == "__main__":
    main()
