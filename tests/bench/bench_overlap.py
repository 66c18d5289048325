"""Steps per hour of the training loop, strictly on-policy (max_steps_off_policy=0) against overlapped (K=1, 2),
with the real CPU evaluator: the demo preset's replay backend (which does not train), or with --simulated-tinker S
the tinker backend against the SDK autospec fakes whose training calls take S-second clock cycles (a simulation of
the service's training time, not a measurement of it). Prints figures; asserts nothing.

    PYTHONPATH=. python tests/bench/bench_overlap.py [--steps 7] [--k 0 1 2] [--workers 2] [--repeats 1]
                                                     [--simulated-tinker 4 --timing-trials 5]
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


_REAL_CLIENTS: dict = {}


def simulated_tinker_config(k: int, steps: int, workers: int, cycle_s: float, timing_trials: int):
    """Single-turn ReLU groups (one correct kernel, one empty answer: every step trains) against the fakes."""
    import tinker

    from tests.core.tinker_sdk_fakes import NO_KERNEL_RESPONSE, RELU_RESPONSE, ClockServer, FakeTinker

    real = _REAL_CLIENTS.setdefault("classes", (tinker.ServiceClient, tinker.RestClient))
    tinker.ServiceClient, tinker.RestClient = real  # the fakes autospec the real classes
    fake = FakeTinker(responses=[RELU_RESPONSE, NO_KERNEL_RESPONSE], clock=ClockServer(cycle_s, 0.05))
    tinker.ServiceClient = fake.service_class
    tinker.RestClient = fake.rest_class
    os.environ["TINKER_API_KEY"] = "tml-bench"
    return load_config("single-turn", [
        "backend=tinker", "model=Qwen/Qwen3-8B", "problems=builtin/relu", f"max_steps={steps}",
        f"max_steps_off_policy={k}", "dataset.batch_size=2", "dataset.group_size=2", "kernel.backend=torch",
        "eval.devices=cpu", f"eval.cpu_workers={workers}", f"eval.timing_trials={timing_trials}", "eval.warmup_trials=1",
        "sampling.max_tokens=2048", "gpus=0", f"checkpoint_every={steps}", "rag.index=null"])


def one_run(k: int, steps: int, workers: int, cycle_s: float = 0.0, timing_trials: int = 5) -> float:
    """Wall seconds of a whole run (setup included: the same for every K)."""
    with tempfile.TemporaryDirectory() as folder:
        os.environ["KRL_WORKSPACE"] = folder
        registry = Registry.for_workspace(folder)
        if cycle_s:
            config = simulated_tinker_config(k, steps, workers, cycle_s, timing_trials)
        else:
            config = load_config("demo", [f"max_steps={steps}", f"max_steps_off_policy={k}", "eval.devices=cpu",
                                          f"eval.cpu_workers={workers}", f"checkpoint_every={steps}"])
        row = registry.create_run(f"overlap-k{k}", config=config.model_dump(mode="json"), backend=config.backend)
        started = time.monotonic()
        code = execute(registry, row["id"], install_signals=False)
        elapsed = time.monotonic() - started
        series = registry.metric_series(row["id"], "time/total")
        waits = registry.metric_series(row["id"], "time/rollout")["value"]
        trains = registry.metric_series(row["id"], "time/train")["value"]
        status = registry.get_run(row["id"])["status"]
        registry.close()
        if code != 0:
            raise SystemExit(f"K={k}: run ended {status}")
        print(f"  K={k}: {elapsed:6.1f} s for {steps} steps (step times {', '.join(f'{v:.1f}' for v in series['value'])};"
              f" waiting for rollouts {sum(waits):.1f} s, training {sum(trains):.1f} s)", flush=True)
        return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--k", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--simulated-tinker", type=float, default=0.0, metavar="CYCLE_S",
                        help="tinker fakes whose training calls take clock cycles of this many seconds")
    parser.add_argument("--timing-trials", type=int, default=5, help="simulated tinker: timed runs per kernel")
    args = parser.parse_args()
    backend = (f"simulated tinker ({args.simulated_tinker:g} s training clock cycles)" if args.simulated_tinker
               else "replay backend (demo recordings)")
    print(f"{backend}, CPU evaluator with {args.workers} workers, {args.steps} steps, {os.cpu_count()} CPUs")
    for k in args.k:
        times = [one_run(k, args.steps, args.workers, args.simulated_tinker, args.timing_trials)
                 for _ in range(args.repeats)]
        best = min(times)
        print(f"K={k}: {3600 * args.steps / best:7.0f} steps/hour (best of {len(times)}: {best:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
