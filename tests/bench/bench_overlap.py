"""Steps per hour of the training loop, strictly on-policy (max_steps_off_policy=0) against overlapped (K=1, 2):
the demo preset's replay backend with the real CPU evaluator. Prints figures; asserts nothing.

    PYTHONPATH=. python tests/bench/bench_overlap.py [--steps 7] [--k 0 1 2] [--workers 2] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.config import load_config  # noqa: E402
from core.registry import Registry  # noqa: E402
from core.train import execute  # noqa: E402


def one_run(k: int, steps: int, workers: int) -> float:
    """Wall seconds of a whole run (setup included: the same for every K)."""
    with tempfile.TemporaryDirectory() as folder:
        os.environ["KRL_WORKSPACE"] = folder
        registry = Registry.for_workspace(folder)
        config = load_config("demo", [f"max_steps={steps}", f"max_steps_off_policy={k}", "eval.devices=cpu",
                                      f"eval.cpu_workers={workers}", f"checkpoint_every={steps}"])
        row = registry.create_run(f"overlap-k{k}", config=config.model_dump(mode="json"), backend="replay")
        started = time.monotonic()
        code = execute(registry, row["id"], install_signals=False)
        elapsed = time.monotonic() - started
        series = registry.metric_series(row["id"], "time/total")
        status = registry.get_run(row["id"])["status"]
        registry.close()
        if code != 0:
            raise SystemExit(f"K={k}: run ended {status}")
        print(f"  K={k}: {elapsed:6.1f} s for {steps} steps (step times {', '.join(f'{v:.1f}' for v in series['value'])})",
              flush=True)
        return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--k", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    print(f"replay backend (demo recordings), CPU evaluator with {args.workers} workers, {args.steps} steps, "
          f"{os.cpu_count()} CPUs")
    for k in args.k:
        times = [one_run(k, args.steps, args.workers) for _ in range(args.repeats)]
        best = min(times)
        print(f"K={k}: {3600 * args.steps / best:7.0f} steps/hour (best of {len(times)}: {best:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
