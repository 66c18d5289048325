"""The picked outputs' binding on a GPU, on and off: attacks that compute the picked calls exactly once named and the
rest of their batch not at all (or in bfloat16), through the real Evaluator with KRL_WORKER_GPU_DIGESTS unset and 0.

Run on a GPU machine from the repository root: python3 tests/bench/probe_gpu_digests.py (one line of JSON a run)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from evaluator.contract.types import EvalRequest  # noqa: E402
from tests.evaluator.pool_support import make_evaluator  # noqa: E402
from tests.evaluator.test_slot_projection_attacks import ATTACKS, MATMUL, SOFTMAX  # noqa: E402

CASES = {"zero_batch_small_outputs": SOFTMAX, "approx_batch_exact_picks": MATMUL}


def main() -> None:
    for setting in ("1", "0"):
        os.environ["KRL_WORKER_GPU_DIGESTS"] = setting
        with tempfile.TemporaryDirectory() as cache, make_evaluator(cache, devices="auto", spare_per_device=0) as ev:
            for name, problem in CASES.items():
                for label, source in ((name, (ATTACKS / f"{name}.py").read_text()),
                                      ("honest", problem.replace("class Model(", "class ModelNew("))):
                    result = ev.evaluate(EvalRequest(reference_source=problem, candidate_source=source,
                                                     problem_id=f"probe/{name}", correctness_trials=3,
                                                     timing_trials=3, warmup_trials=1, run_timeout_s=90.0))
                    print(json.dumps({"digests": setting, "problem": name, "candidate": label,
                                      "verdict": result.verdict.value, "speedup": result.speedup,
                                      "picks_unbound": (result.phase_times_s or {}).get("timing_picks_unbound"),
                                      "message": (result.error_message or "")[:200]}), flush=True)


if __name__ == "__main__":
    main()
