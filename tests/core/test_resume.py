"""Exact resume: a run stopped after its second step and resumed produces the same third step (responses, verdicts,
rewards, advantages, metrics except timings, weights) as an uninterrupted run; forks start from the parent's checkpoint;
SIGTERM on a real `python -m core.train` process checkpoints and stops."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from core.config import load_config
from core.registry import Registry
from core.train import execute

OVERRIDES = [
    "backend=local", "model=tiny-random", "local.device=cpu", "local.lora_rank=4",
    "problems=builtin/relu,builtin/softmax", "dataset.batch_size=1", "dataset.group_size=2", "max_turns=2",
    "early_stop.mode=never", "sampling.max_tokens=24", "kernel.backend=torch", "eval.devices=cpu",
    "eval.correctness_trials=1", "eval.timing_trials=2", "eval.warmup_trials=0", "eval.cpu_workers=1", "optim.lr=1e-2",
    "optim.warmup_steps=1", "optim.schedule=cosine", "gpus=0", "seed=3", "max_steps=3", "checkpoint_every=1",
]


def step_data(registry: Registry, run_id: int, step: int) -> dict:
    trajectories = []
    for traj in registry.trajectories(run_id, step_min=step, step_max=step, order="step"):
        turns = registry.trajectory_turns(traj["id"])
        trajectories.append({
            "key": (traj["group_index"], traj["sample_index"], traj["problem_id"]),
            "return": traj["total_return"],
            "turns": [(t["response"], t["verdict"], t["step_score"], t["return_"], t["advantage"], t["prompt"])
                      for t in turns],
        })
    metrics = {}
    for key in registry.metric_keys(run_id):
        series = registry.metric_series(run_id, key, step_min=step, step_max=step)
        # Wall times and the host's load (system/*) differ between any two runs; everything learned must not.
        if series["value"] and not key.startswith(("time/", "system/")):
            metrics[key] = series["value"][0]
    return {"trajectories": trajectories, "metrics": metrics}


def weights(path: str) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)["weights"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    registry = Registry.for_workspace(tmp_path_factory.mktemp("ws"))
    config = load_config("kevin", OVERRIDES).model_dump(mode="json")
    straight = registry.create_run("straight", config=config, backend="local")
    assert execute(registry, straight["id"], install_signals=False) == 0
    paused = registry.create_run("paused", config=config, backend="local")
    assert execute(registry, paused["id"], install_signals=False, stop_after_step=1) == 0
    after_stop = registry.get_run(paused["id"])
    assert execute(registry, paused["id"], install_signals=False) == 0
    yield registry, straight["id"], paused["id"], after_stop
    registry.close()


@pytest.mark.slow
def test_a_paused_run_stops_with_a_checkpoint(runs):
    registry, _, paused, after_stop = runs
    assert after_stop["status"] == "stopped" and after_stop["last_step"] == 1
    assert registry.get_run(paused)["status"] == "finished"
    assert [c["step"] for c in registry.checkpoints(paused)] == [0, 1, 2]
    statuses = [e["message"].split(":")[0] for e in registry.events(paused) if e["kind"] == "status"]
    assert statuses[-4:] == ["running", "stopped", "running", "finished"]
    assert any(e["kind"] == "resume" and "step-000001" in e["message"] for e in registry.events(paused))
    lines = (registry.run_dir("paused") / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 1, 2]


@pytest.mark.slow
def test_resumed_step_equals_uninterrupted_step(runs):
    registry, straight, paused, _ = runs
    expected, resumed = step_data(registry, straight, 2), step_data(registry, paused, 2)
    assert expected["trajectories"] and expected["metrics"]
    assert resumed["trajectories"] == expected["trajectories"]
    assert resumed["metrics"] == pytest.approx(expected["metrics"])
    # The earlier steps match too, and steps are not duplicated.
    assert step_data(registry, paused, 1) == step_data(registry, straight, 1)
    assert len(registry.trajectories(paused)) == len(registry.trajectories(straight))


@pytest.mark.slow
def test_resume_restored_weights_and_optimizer(runs):
    registry, straight, paused, _ = runs
    final_a = weights(registry.last_checkpoint(straight)["state_path"])
    final_b = weights(registry.last_checkpoint(paused)["state_path"])
    assert final_a.keys() == final_b.keys()
    assert all(torch.equal(final_a[k], final_b[k]) for k in final_a)
    first = weights(registry.checkpoints(straight)[0]["state_path"])
    assert any(not torch.equal(first[k], final_a[k]) for k in first), "no training happened: the test proves nothing"


@pytest.mark.slow
def test_fork_starts_from_the_parent_checkpoint(runs):
    registry, straight, _, _ = runs
    config = load_config("kevin", OVERRIDES + ["max_steps=3", "optim.lr=5e-3"]).model_dump(mode="json")
    fork = registry.create_run("fork", config=config, backend="local", parent_run_id=straight, parent_step=1)
    assert execute(registry, fork["id"], install_signals=False) == 0
    row = registry.get_run(fork["id"])
    assert row["status"] == "finished"
    assert [t["step"] for t in registry.trajectories(fork["id"], order="step")] == [2, 2]
    # The forked step 2 sampled from the parent's step-1 weights: same prompts and first responses.
    parent_step = step_data(registry, straight, 2)["trajectories"]
    fork_step = step_data(registry, fork["id"], 2)["trajectories"]
    assert [t["turns"][0][0] for t in fork_step] == [t["turns"][0][0] for t in parent_step]


# ---------------------------------------------------------------- SIGTERM on a real job process

def _group_gone(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_sigterm_checkpoints_and_stops_a_job_process(registry, workspace):
    config = load_config("kevin", OVERRIDES + ["max_steps=200", "checkpoint_every=100"])
    row = registry.create_run("sigterm", config=config.model_dump(mode="json"), backend="local")
    log = open(workspace / "job.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "core.train", str(row["id"]), "--workspace", str(workspace)],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            cwd=str(Path(__file__).resolve().parents[2]))
    try:
        deadline = time.monotonic() + 120
        # Signal once setup is done (the job logs its plan): step 0 is then in flight and gets abandoned.
        while "run sigterm:" not in (workspace / "job.log").read_text():
            assert proc.poll() is None, (workspace / "job.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the job did not start within 120 s"
            time.sleep(0.2)
        running = registry.get_run(row["id"])
        assert running["status"] == "running" and time.time() - running["heartbeat_at"] < 10
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert _group_gone(proc.pid, timeout_s=15), "evaluator workers outlived the job"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    stopped = registry.get_run(row["id"])
    assert stopped["status"] == "stopped" and stopped["exit_code"] == 0
    checkpoint = registry.last_checkpoint(row["id"])
    assert checkpoint is not None and checkpoint["step"] == (stopped["last_step"] if stopped["last_step"] is not None
                                                            else -1)
    assert Path(checkpoint["state_path"]).is_file()
    assert "SIGTERM received" in (workspace / "job.log").read_text()
