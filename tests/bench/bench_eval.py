"""Benchmark: a model evaluation's throughput and how busy it keeps the evaluator (sampling overlaps evaluation).
Prints one JSON line per run. Usage: .venv/bin/python tests/bench/bench_eval.py [--problems builtin] [--samples 2]
[--turns 3] [--backend replay|local] [--workers 2]; figures go to the README with the machine they came from."""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--problems", default="builtin")
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--backend", default="replay", choices=("replay", "local"))
    parser.add_argument("--workers", type=int, default=2, help="CPU evaluator workers (GPU: one per device)")
    args = parser.parse_args()

    from core.config import load_config
    from core.evaluation import eval_summary, evaluate_foreground
    from core.registry import Registry

    backend = ["backend=replay", "replay.path=demo"] if args.backend == "replay" else \
        ["backend=local", "model=tiny-random", "local.device=cpu", "sampling.max_tokens=64"]
    cfg = load_config("demo", backend + [f"problems={args.problems}", f"evaluation.samples={args.samples}",
                                         f"max_turns={args.turns}", f"eval.cpu_workers={args.workers}"])
    with tempfile.TemporaryDirectory() as workspace:
        started = time.monotonic()
        row = evaluate_foreground(cfg, "bench", workspace)
        wall_s = time.monotonic() - started
        with Registry.for_workspace(workspace) as reg:
            summary = eval_summary(reg, row["id"])
    print(json.dumps({"machine": platform.node(), "cpus": __import__("os").cpu_count(), "backend": args.backend,
                      "problems": summary["problems_total"], "samples_per_problem": args.samples,
                      "turns_per_sample": args.turns,
                      "status": row["status"], "wall_s_with_startup": round(wall_s, 1), **{f"run_{k}": v for k, v in summary["throughput"].items()},
                      "devices": summary["stamp"].get("devices")}))


if __name__ == "__main__":
    main()
