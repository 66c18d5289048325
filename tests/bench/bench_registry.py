"""Registry benchmark: prints metric ingest rate, downsampling time and run-listing time (no asserts).
Run: `.venv/bin/python tests/bench/bench_registry.py` (or `make bench-registry`); uses a temporary workspace."""

from __future__ import annotations

import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.registry import BLOCK_STEPS, Registry, TrajectoryRecord, TurnRecord  # noqa: E402

SERIES_POINTS = 200_000
DOWNSAMPLE_TO = 1_000
RUNS = 5_000
REPEATS = 7

# A realistic resolved config (the size of RunConfig.model_dump()) so run listing decodes real JSON.
CONFIG = {
    "model": "Qwen/Qwen3-8B", "backend": "tinker", "problems": "builtin", "max_steps": 200, "seed": 0, "max_turns": 4,
    "dataset": {"batch_size": 8, "group_size": 16},
    "kernel": {"backend": "triton", "precision": "fp32"},
    "eval": {"devices": "auto", "correctness_trials": 5, "timing_trials": 100, "size": "gpu"},
    "reward": {"weights": {"format": 0.1, "compile": 0.1, "correct": 1.0, "speed": 1.0}, "speed_mode": "log",
               "gamma": 0.4, "hack_penalty": -1.0, "partial_credit": True, "normalise_std": False,
               "leave_one_out": True},
    "stages": [{"start_step": 0, "weights": {"correct": 1.0}}, {"start_step": 50, "weights": {"speed": 1.0}}],
    "loss": {"kind": "importance_sampling", "substeps": 1},
    "optim": {"lr": 2e-5, "warmup_steps": 10, "schedule": "cosine", "grad_clip": 1.0},
    "sampling": {"max_tokens": 8192, "temperature": 1.0},
    "early_stop": {"mode": "correct", "speedup_threshold": 1.0}, "checkpoint_every": 10,
    "rag": {"index": None, "k": 2}, "replay": {"path": None}, "openai": {"base_url": None}, "gpus": 1,
}
SUMMARY_KEYS = ("reward/mean", "reward/std", "solve_rate", "speedup/mean", "loss", "kl", "entropy", "tokens/s")


def _best_ms(fn, repeats: int = REPEATS) -> tuple[float, float, float]:
    """(best wall ms, median wall ms, best CPU ms). CPU time is reported too because shared machines
    (CI, other jobs) stretch wall time with time spent waiting for a core."""
    walls, cpus = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append((time.perf_counter() - start) * 1000)
        cpus.append((time.process_time() - start_cpu) * 1000)
    return min(walls), statistics.median(walls), min(cpus)


def _timed(fn) -> tuple[float, float]:
    start, start_cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - start, time.process_time() - start_cpu


def bench_ingest(reg: Registry) -> None:
    run = reg.create_run("ingest", kind="train")
    rows = [(f"metric/{k}", step, random.random(), 1.7e9 + step) for step in range(20_000) for k in range(10)]
    elapsed, cpu = _timed(lambda: reg.insert_metric_rows(run["id"], rows))
    print(f"ingest, batched (insert_metric_rows, {len(rows):,} rows, one transaction): "
          f"{len(rows) / elapsed:,.0f} rows/s ({len(rows) / cpu:,.0f} rows per CPU-second)")

    run = reg.create_run("ingest-steps", kind="train")
    metrics_per_step, steps = 100, 2_000
    keys = [f"metric/{k}" for k in range(metrics_per_step)]
    values = [{k: random.random() for k in keys} for _ in range(steps)]

    def write_steps() -> None:
        for step in range(steps):
            reg.write_step(run["id"], step, values[step])

    elapsed, cpu = _timed(write_steps)
    print(f"ingest, one write_step transaction per step ({metrics_per_step} metrics x {steps} steps): "
          f"{metrics_per_step * steps / elapsed:,.0f} rows/s, {elapsed / steps * 1000:.2f} ms/step "
          f"(CPU {cpu / steps * 1000:.2f} ms/step)")

    run = reg.create_run("ingest-trajectories", kind="train")
    turns = [TurnRecord(turn=t, prompt="p" * 4000, response="r" * 6000, kernel="k" * 3000, verdict="correct",
                        eval_result={"verdict": "correct", "speedup": 1.3}) for t in range(4)]
    trajectories = [TrajectoryRecord(group=g, sample=s, problem_id=f"builtin/p{g}", turns=turns, total_return=1.0,
                                     solved=True, best_speedup=1.2) for g in range(8) for s in range(16)]
    steps = 20
    elapsed, cpu = _timed(lambda: [reg.write_step(run["id"], step, values[step], trajectories) for step in range(steps)])
    print(f"write_step with 100 metrics + 128 trajectories x 4 turns (~13 KB text per turn): "
          f"{elapsed / steps * 1000:.1f} ms/step (CPU {cpu / steps * 1000:.1f} ms/step)")


def bench_downsample(reg: Registry) -> None:
    run = reg.create_run("series", kind="train")
    rng = random.Random(0)
    rows = [("reward/mean", step, rng.gauss(0, 1) + (25.0 if step == 123_457 else 0.0), 1.7e9 + step)
            for step in range(SERIES_POINTS)]
    reg.insert_metric_rows(run["id"], rows)
    result = {}

    def downsample() -> None:
        result.update(reg.metric_series(run["id"], "reward/mean", max_points=DOWNSAMPLE_TO))

    first_s, first_cpu_s = _timed(downsample)
    print(f"downsample {SERIES_POINTS:,} -> {DOWNSAMPLE_TO} points, first call (fills the block cache): "
          f"{first_s * 1000:.1f} ms (CPU {first_cpu_s * 1000:.1f} ms)")
    best, median, cpu = _best_ms(downsample)
    kept_spike = 123_457 in result["step"]
    print(f"downsample {SERIES_POINTS:,} -> {len(result['step'])} points (max {DOWNSAMPLE_TO}), later calls: "
          f"best {best:.1f} ms, median {median:.1f} ms, CPU {cpu:.1f} ms (spike kept: {kept_spike})")
    walls, cpus = [], []
    for extra in range(3 * BLOCK_STEPS):  # crosses block boundaries, so the cache gets filled as it goes
        reg.write_step(run["id"], SERIES_POINTS + extra, {"reward/mean": rng.gauss(0, 1)})
        wall_s, cpu_s = _timed(downsample)
        walls.append(wall_s * 1000)
        cpus.append(cpu_s * 1000)
    print(f"downsample while the run grows (a write_step before each of {len(walls)} reads): "
          f"median {statistics.median(walls):.1f} ms, max {max(walls):.1f} ms, median CPU {statistics.median(cpus):.1f} ms")
    best, median, cpu = _best_ms(lambda: reg.metric_series(run["id"], "reward/mean"), repeats=3)
    print(f"full series read ({SERIES_POINTS:,} points, no downsampling): best {best:.1f} ms, CPU {cpu:.1f} ms")


def bench_list_runs(reg: Registry) -> None:
    rng = random.Random(1)
    with reg.transaction():
        for index in range(RUNS):
            run = reg.create_run(f"run-{index:05d}", kind="train", config=CONFIG, preset="kevin", model=CONFIG["model"],
                                 backend="tinker", problem_set="builtin", tags=["sweep", f"lr{index % 5}"],
                                 status=rng.choice(["finished", "failed", "running", "stopped"]))
            for step in range(20):
                reg.write_step(run["id"], step, {k: rng.random() for k in SUMMARY_KEYS})
    rows = []

    def listing(**kwargs) -> None:
        rows[:] = reg.list_runs(**kwargs)

    best, median, cpu = _best_ms(lambda: listing(include_config=False))
    print(f"list_runs(include_config=False), {len(rows):,} runs with summaries: best {best:.1f} ms, "
          f"median {median:.1f} ms, CPU {cpu:.1f} ms")
    from app.screens.loaders import RUN_ROW_COLUMNS

    best, median, cpu = _best_ms(lambda: listing(columns=RUN_ROW_COLUMNS))
    print(f"list_runs(columns=the runs table's {len(RUN_ROW_COLUMNS)}), {len(rows):,} runs with summaries: "
          f"best {best:.1f} ms, median {median:.1f} ms, CPU {cpu:.1f} ms")
    best, median, cpu = _best_ms(listing)
    print(f"list_runs(), {len(rows):,} runs with summaries and decoded configs (~1 KB each): best {best:.1f} ms, "
          f"median {median:.1f} ms, CPU {cpu:.1f} ms")
    ids = [r["id"] for r in rows]
    best, median, cpu = _best_ms(lambda: reg.metric_tail(ids, "reward/mean", 20))
    print(f"metric_tail for {len(ids):,} runs (sparklines, 20 points each): best {best:.1f} ms, "
          f"median {median:.1f} ms, CPU {cpu:.1f} ms")


def main() -> None:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor()) if os.path.exists("/proc/cpuinfo") else platform.processor()
    import sqlite3

    print(f"machine: {cpu}, {os.cpu_count()} cores; Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}; "
          f"load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        for bench in (bench_ingest, bench_downsample, bench_list_runs):
            reg = Registry(Path(tmp) / bench.__name__ / "registry.db")
            try:
                bench(reg)
            finally:
                reg.close()
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
