"""Registries filled with fixed, generated data for the TUI's tests, snapshots and benchmark.
Everything is seeded and time-stamped from FIXED_NOW so screens render identically on every machine."""

from __future__ import annotations

import math
import random
from typing import Any

from core.registry import Registry, TrajectoryRecord, TurnRecord
from evaluator.api import EvalResult, RuntimeStats, Verdict

FIXED_NOW = 1_790_000_000.0  # a fixed "now" for clocks injected into the app
PROBLEMS = ("builtin/relu", "builtin/softmax", "builtin/matmul", "builtin/layernorm")
METRIC_KEYS = ("reward/total", "reward/correct", "reward/speed", "reward/format", "rate/correct", "rate/compile",
               "rate/format", "rate/hack", "speedup/mean", "turn/0/correct_rate", "turn/1/correct_rate",
               "eval/time_s", "loss", "optim/lr")

KERNEL_CUDA_V0 = '''import torch
from torch.utils.cpp_extension import load_inline

cuda_src = """
__global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0 ? x[i] : 0
}
"""
'''
KERNEL_CUDA_V1 = '''import torch
from torch.utils.cpp_extension import load_inline

cuda_src = """
__global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0 ? x[i] : 0;
}
torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    relu_kernel<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
"""
ext = load_inline("relu_ext", cpp_sources="torch::Tensor relu(torch::Tensor x);", cuda_sources=cuda_src,
                  functions=["relu"])


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.relu(x)
'''
KERNEL_TORCH_V0 = '''import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=0)
'''
KERNEL_TORCH_V1 = '''import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        shifted = x - x.max(dim=-1, keepdim=True).values
        e = shifted.exp()
        return e / e.sum(dim=-1, keepdim=True)
'''
FEEDBACK = {
    "compile_error": "Your kernel failed to compile:\nrelu_ext.cu(7): error: expected a \";\"\n"
                     "      if (i < n) y[i] = x[i] > 0 ? x[i] : 0\n                                           ^\n"
                     "Fix the error and answer with the full corrected kernel.",
    "wrong_output": "Your kernel compiled but its output is wrong: max abs difference 0.731 (tolerance 1e-02) "
                    "on trial 1 of 5.\nCheck the reduction axis.",
    "correct": "Your kernel is correct. Speedup over the reference: 1.42x (kernel 0.118 ms, reference 0.168 ms).\n"
               "Try to make it faster.",
    "hack_detected": "Your kernel was rejected: it calls the reference implementation (rule: calls_reference).",
}


def _stats(median_ms: float) -> RuntimeStats:
    return RuntimeStats(median_ms=median_ms, mean_ms=median_ms, std_ms=0.0, min_ms=median_ms, max_ms=median_ms,
                        iqr_ms=0.0, n=10)


def _eval_result(problem: str, verdict: str) -> dict[str, Any]:
    """An evaluator record in the evaluator's own shape (EvalResult.to_dict): timing statistics, not bare numbers."""
    correct = verdict == "correct"
    return EvalResult(request_id="", problem_id=problem, verdict=Verdict(verdict), compiled=verdict != "compile_error",
                      kernel_runtime=_stats(0.118) if correct else None,
                      reference_runtime=_stats(0.168) if correct else None,
                      speedup=1.42 if correct else None).to_dict()


def _turns_for(rng: random.Random, problem: str, n_turns: int, solved: bool, hack: bool) -> list[TurnRecord]:
    cuda = problem.endswith("relu") or problem.endswith("matmul")
    kernels = (KERNEL_CUDA_V0, KERNEL_CUDA_V1) if cuda else (KERNEL_TORCH_V0, KERNEL_TORCH_V1)
    turns = []
    for t in range(n_turns):
        last = t == n_turns - 1
        if hack and last:
            verdict = "hack_detected"
        elif solved and last:
            verdict = "correct"
        else:
            verdict = "compile_error" if (cuda and t == 0) else "wrong_output"
        kernel = kernels[min(t, 1)]
        score = {"correct": 1.3, "wrong_output": 0.1, "compile_error": 0.0, "hack_detected": -1.0}[verdict]
        breakdown = {"correct": 1.0 if verdict == "correct" else 0.0, "speed": 0.3 if verdict == "correct" else 0.0,
                     "format": 0.1, "hack": -1.0 if verdict == "hack_detected" else 0.0}
        result = _eval_result(problem, verdict)
        turns.append(TurnRecord(
            turn=t, prompt=f"Write a fast kernel for {problem}.\n(turn {t})", response=f"<think>plan {t}</think>\n```python\n{kernel}```",
            kernel=kernel, thought=f"Turn {t}: the previous attempt had a problem; fix the indexing and launch config.",
            verdict=verdict, eval_result=result, feedback=FEEDBACK[verdict], step_score=score,
            return_=round(score * (n_turns - t) * 0.8, 3), advantage=round(rng.uniform(-1, 1), 3),
            reward_breakdown=breakdown, tokens_in=900 + 300 * t, tokens_out=400 + 20 * t,
            retrieved=[{"id": "ex-relu-1", "name": "relu vectorised", "backend": "cuda", "speedup": 2.1}] if t == 0 and cuda else []))
    return turns


def _trajectories(rng: random.Random, step: int, groups: int, samples: int, max_turns: int) -> list[TrajectoryRecord]:
    out = []
    for g in range(groups):
        problem = PROBLEMS[(step + g) % len(PROBLEMS)]
        for s in range(samples):
            n_turns = 1 + (step + s + g) % max_turns
            hack = (step * 7 + s + g) % 23 == 0
            solved = not hack and (step + s) % 3 != 0
            turns = _turns_for(rng, problem, n_turns, solved, hack)
            out.append(TrajectoryRecord(
                group=g, sample=s, problem_id=problem, turns=turns, total_return=turns[0].return_, solved=solved,
                solved_at_turn=n_turns - 1 if solved else None, best_speedup=1.42 + 0.01 * (step % 10) if solved else None,
                hack=hack))
    return out


def _metric_value(key: str, step: int, seed: int) -> float:
    # Smooth trend plus deterministic wiggle, so curves look like training.
    progress = 1 - math.exp(-step / 25)
    wiggle = math.sin(step * 1.7 + seed) * 0.08 + math.sin(step * 0.31 + 2 * seed) * 0.05
    base = {"reward/total": 0.2 + 1.1 * progress, "rate/correct": 0.1 + 0.7 * progress, "rate/compile": 0.5 + 0.45 * progress,
            "rate/format": 0.8 + 0.19 * progress, "rate/hack": 0.05 * (1 - progress), "speedup/mean": 0.8 + 0.9 * progress,
            "loss": 1.0 - 0.6 * progress, "optim/lr": 3e-5, "eval/time_s": 4.0 + (step % 5) * 0.3}.get(key, 0.3 + 0.5 * progress)
    if key == "optim/lr":
        return base
    return round(base + wiggle * (0.3 if key.startswith("rate/hack") else 1.0), 5)


RUN_SPECS: tuple[dict[str, Any], ...] = (
    {"name": "kevin-8b-baseline", "status": "finished", "kind": "train", "backend": "tinker", "model": "Qwen/Qwen3-8B",
     "preset": "kevin", "steps": 40, "total": 40, "tags": ["baseline"], "seed": 1},
    {"name": "kevin-8b-lr3e-5", "status": "running", "kind": "train", "backend": "tinker", "model": "Qwen/Qwen3-8B",
     "preset": "kevin", "steps": 24, "total": 60, "tags": ["lr-sweep"], "seed": 2, "gpus": [0, 1], "lr": 3e-5},
    {"name": "single-turn-ablation", "status": "stopped", "kind": "train", "backend": "tinker", "model": "Qwen/Qwen3-8B",
     "preset": "single-turn", "steps": 18, "total": 40, "tags": ["ablation"], "seed": 3, "max_turns": 1},
    {"name": "demo-replay", "status": "finished", "kind": "replay", "backend": "replay", "model": "recorded",
     "preset": "demo", "steps": 12, "total": 12, "tags": ["demo"], "seed": 4},
    {"name": "tiny-local-smoke", "status": "failed", "kind": "train", "backend": "local", "model": "tiny-random",
     "preset": "kevin", "steps": 3, "total": 20, "tags": [], "seed": 5, "error": "RuntimeError: CUDA out of memory"},
    {"name": "kevin-32b-queued", "status": "queued", "kind": "train", "backend": "tinker", "model": "Qwen/Qwen3-32B",
     "preset": "kevin", "steps": 0, "total": 100, "tags": ["lr-sweep"], "seed": 6, "gpus_requested": 4},
)


def _config(spec: dict[str, Any]) -> dict[str, Any]:
    return {"model": spec["model"], "backend": spec["backend"], "problems": "builtin", "max_steps": spec["total"],
            "seed": spec["seed"], "max_turns": spec.get("max_turns", 4),
            "dataset": {"batch_size": 4, "group_size": 4},
            "kernel": {"backend": "torch" if spec["backend"] == "replay" else "cuda", "precision": "fp32"},
            "reward": {"weights": {"correct": 1.0, "speed": 0.5, "format": 0.1}, "gamma": 0.4},
            "optim": {"lr": spec.get("lr", 1e-5), "warmup_steps": 0}, "checkpoint_every": 10}


def populate(reg: Registry, specs: tuple[dict[str, Any], ...] = RUN_SPECS, groups: int = 2, samples: int = 2,
             max_turns: int = 3) -> dict[str, int]:
    """Create the fixed runs with metrics, trajectories, checkpoints and events; returns name -> id."""
    ids = {}
    for index, spec in enumerate(specs):
        run = reg.create_run(spec["name"], kind=spec["kind"], config=_config(spec), preset=spec["preset"],
                             model=spec["model"], backend=spec["backend"], problem_set="builtin",
                             gpus_requested=spec.get("gpus_requested", len(spec.get("gpus", []))),
                             total_steps=spec["total"], tags=spec["tags"], status="queued")
        run_id = ids[spec["name"]] = run["id"]
        created = FIXED_NOW - 3600 * (len(specs) - index) - 600
        rng = random.Random(spec["seed"])
        for step in range(spec["steps"]):
            wall = created + 60 + step * 30
            metrics = {key: _metric_value(key, step, spec["seed"]) for key in METRIC_KEYS}
            reg.write_step(run_id, step, metrics, _trajectories(rng, step, groups, samples, max_turns), wall_time=wall)
            if (step + 1) % 10 == 0:
                reg.add_checkpoint(run_id, step, f"step-{step:06d}", f"/ckpt/{spec['name']}/{step}/state",
                                   f"/ckpt/{spec['name']}/{step}/sampler")
        started = created + 30 if spec["status"] != "queued" else None
        ended = created + 90 + spec["steps"] * 30 if spec["status"] in ("finished", "stopped", "failed") else None
        reg.set_status(run_id, spec["status"], "", created_at=created, started_at=started, ended_at=ended,
                       gpus=spec.get("gpus", []), error=spec.get("error"), host="gpu-box",
                       heartbeat_at=(FIXED_NOW - 2) if spec["status"] == "running" else ended)
        reg.conn.execute("UPDATE checkpoints SET created_at = ? WHERE run_id = ?", (created + 500, run_id))
        reg.conn.execute("UPDATE events SET time = ? WHERE run_id = ?", (created, run_id))
    return ids


def populate_big(reg: Registry, n_runs: int = 1000, metric_rows: int = 200_000, turns: int = 20_000) -> int:
    """The benchmark workspace: n_runs small runs plus one big run; returns the big run's id."""
    big = reg.create_run("big-run", config=_config(RUN_SPECS[0]), preset="kevin", model="Qwen/Qwen3-8B",
                         backend="tinker", problem_set="builtin", total_steps=10_000, status="running")["id"]
    keys = METRIC_KEYS
    steps = metric_rows // len(keys)
    reg.insert_metric_rows(big, ((k, s, _metric_value(k, s, 1), FIXED_NOW - 100_000 + s * 5)
                                 for s in range(steps) for k in keys))
    rng = random.Random(7)
    per_step, max_turns, written, step = 8, 3, 0, 0
    while written < turns:
        trajs = _trajectories(rng, step, 2, per_step // 2, max_turns)
        written += sum(len(t.turns) for t in trajs)
        reg.write_step(big, step, {"reward/total": _metric_value("reward/total", step, 1)}, trajs,
                       wall_time=FIXED_NOW - 100_000 + step * 5)
        step += 1
    reg.update_run(big, last_step=steps - 1)
    statuses = ("finished", "stopped", "failed", "finished", "crashed")
    with reg.transaction():
        for i in range(n_runs - 1):
            run = reg.create_run(f"sweep-{i:04d}", config=_config(RUN_SPECS[i % 4]), preset="kevin",
                                 model="Qwen/Qwen3-8B", backend="tinker", total_steps=50, tags=[f"sweep{i % 7}"],
                                 status=statuses[i % len(statuses)])
            reg.log_metrics(run["id"], 49, {"reward/total": 0.5 + (i % 13) / 13, "rate/correct": (i % 11) / 11})
    return big


# ---------------------------------------------------------------- pytest helpers shared by the TUI tests

LOG_LINES = [f"step {i}: reward 0.{i:02d} correct {i % 4}/4 eval 3.{i}s" for i in range(30)] + \
    ["WARNING candidate timed out (builtin/matmul turn 2)", "checkpoint step-000029 saved"]


def run_krl(capsys, monkeypatch, args, env=None, folder=None) -> tuple[int, str, str]:
    """`krl ARGS…` in this process through app.cli.main, as the console script runs it: (exit code, stdout, stderr),
    with `env` set and `folder` as the working directory for the call only."""
    import sys

    from app.cli import main

    capsys.readouterr()
    with monkeypatch.context() as patch:
        for key, value in (env or {}).items():
            patch.setenv(key, value)
        if folder is not None:
            patch.chdir(folder)
        patch.setattr(sys, "argv", ["krl", *args])
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    out, err = capsys.readouterr()
    return code, out, err


def open_registry(workspace) -> Registry:
    """The registry of a workspace a test made (never created here)."""
    return Registry.for_workspace(workspace, create=False)


def make_app(workspace, **kwargs):
    """A KrlApp with frozen time, no live refresh and no reconcile unless asked (snapshots stay fixed)."""
    from app.tui import KrlApp

    options = {"clock": lambda: FIXED_NOW, "live": False, "reconcile": False, "remember_theme": False, "theme": "krl-dark",
               "workspace_label": "~/kernelrl/runs"}
    options.update(kwargs)
    return KrlApp(workspace=workspace, **options)


async def settle_screen(pilot, delay: float = 0.05, rounds: int = 60) -> None:
    """settle, then wait until two screenshots taken `delay` apart agree (bounded): a table filled after its first paint
    measures its columns on a later refresh, which a loaded machine may not have run yet when a snapshot is taken."""
    await settle(pilot)
    previous = None
    for _ in range(rounds):
        current = pilot.app.export_screenshot()
        if current == previous:
            return
        previous = current
        await pilot.pause(delay)
        await settle(pilot)


async def settle(pilot, delay: float = 0.05, rounds: int = 40) -> None:
    """Wait until no worker is running and the message queues are drained (bounded)."""
    app = pilot.app

    def unfinished() -> list:
        # Pending counts too: on a loaded machine a worker a tab just created may not have started yet, and a table
        # it fills after the screenshot shows its rows at header width.
        return [w for w in app.workers if not w.is_finished]

    for _ in range(rounds):
        await pilot.pause(delay)
        busy = unfinished()
        if not busy:
            await pilot.pause()
            if not unfinished():
                return
        else:
            try:
                await app.workers.wait_for_complete(busy)
            except Exception:  # an exclusive worker replaced by a newer one reports itself cancelled
                pass
    await pilot.pause()


def filled_workspace(path) -> tuple[Registry, dict[str, int]]:
    reg = Registry.for_workspace(path)
    ids = populate(reg)
    log = reg.run_dir("kevin-8b-baseline")
    log.mkdir(parents=True, exist_ok=True)
    (log / "logs.log").write_text("\n".join(LOG_LINES) + "\n")
    return reg, ids


def multi_turn_trajectory(reg: Registry, run_id: int, turns: int = 3) -> int:
    """The id of the first trajectory of a run with at least `turns` turns."""
    for row in reg.trajectories(run_id, order="step", limit=10_000):
        if row["n_turns"] >= turns:
            return row["id"]
    raise AssertionError("fixture has no multi-turn trajectory")
